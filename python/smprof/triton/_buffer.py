"""sp.buffer(): the value a kernel's `prof` argument takes at launch.

The argument carries no data: the arena reaches the kernel through its
module (g_arena, published by the injector), so the same compiled kernel
records under smprof-run or smprof.profile() and costs one uniform branch
per marker without them; a CUDA graph captured before profiling starts
records once it has. What the argument decides is compile time: a pointer
keeps the markers, None removes them (Triton specialises None into a
constant, so the kernel is compiled without them).

The pointer is a null int64 pointer: an object with `data_ptr()` (0) and a
`dtype`, which Triton's launcher passes without looking it up. It is
torch.int64 when torch is loaded (what Triton expects of tensors), else a
stand-in whose name ends in "int64" (all Triton reads of it).
"""

from __future__ import annotations

import os
import sys

# SMPROF_TRITON=off (or 0, false, no): sp.buffer() returns None, so every
# marker is compiled out.
_OFF_VALUES = {"0", "off", "false", "no"}


class _Int64:
    def __str__(self) -> str:
        return "int64"

    __repr__ = __str__


class NullBuffer:
    """A null pointer argument: keeps a kernel's markers compiled in."""

    __slots__ = ()

    @property
    def dtype(self):
        torch = sys.modules.get("torch")
        return torch.int64 if torch is not None else _Int64()

    def data_ptr(self) -> int:
        return 0

    def __repr__(self) -> str:
        return "smprof.triton.buffer()"


_BUFFER = NullBuffer()


def enabled() -> bool:
    """False when SMPROF_TRITON turns the markers off."""
    return os.environ.get("SMPROF_TRITON", "on").strip().lower() not in _OFF_VALUES


def buffer():
    """The `prof` argument for a kernel with smprof markers: a null pointer
    object (markers compiled in), or None when SMPROF_TRITON=off (markers
    compiled out)."""
    return _BUFFER if enabled() else None
