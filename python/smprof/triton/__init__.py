"""smprof markers for @triton.jit kernels.

    import smprof.triton as sp

    @triton.jit
    def kernel(..., prof):
        sp.begin(prof, "load")
        ...
        sp.end(prof, "load")
        with sp.range(prof, "mma"):
            ...
        sp.instant(prof, "tile_done", value=tile)

    kernel[grid](..., prof=sp.buffer())

Run the program under `smprof-run` (or inside `smprof.profile()`): events
land in the same trace as CUDA C++ markers. `prof=None` (or
SMPROF_TRITON=off, which makes sp.buffer() return None) compiles the
markers out. Importing this module installs smprof's step in Triton's
compiler (_hook.py); the markers need Triton, the rest of this module not.
"""

from smprof.triton._buffer import NullBuffer, buffer, enabled
from smprof.triton._hook import install as _install_hook
from smprof.triton._ptx_rewrite import RewriteError

_MARKERS = ("begin", "end", "instant", "counter", "phase", "phase_end", "async_begin", "async_end", "range")

__all__ = ["NullBuffer", "RewriteError", "buffer", "enabled", *_MARKERS]

_install_hook()


def __getattr__(name):
    # The markers import Triton; everything else here works without it.
    if name in _MARKERS:
        from smprof.triton import _markers

        return getattr(_markers, name)
    raise AttributeError(f"module 'smprof.triton' has no attribute {name!r}")
