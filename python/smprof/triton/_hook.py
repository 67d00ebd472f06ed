"""Puts the PTX rewriter (_ptx_rewrite.py) into Triton's compiler.

Triton 3.x calls `knobs.runtime.add_stages_inspection_hook` in two ways:
with no arguments, for a (key, hash) pair, and with (backend, stages,
options, language, capability) when it builds a compile pipeline, to let it
change the stages. Of the pair, the launch path puts the *hash* into the
in-memory cache key, and `triton.compile` appends the *key* to the on-disk
cache key (~/.triton/cache; Triton 3.6), so both must change with the code
that writes the PTX: otherwise a kernel compiled by another smprof version
(another prologue or marker layout) would be loaded from disk. smprof wraps
the "ptx" stage, so what is cached (the PTX, then the cubin) already holds
the globals and prologue. A hook installed before smprof's is kept and called (both keys
count); smprof's is installed once.
"""

from __future__ import annotations

import hashlib
import os

from smprof.triton import _marker_ptx, _ptx_rewrite

_KEY = f"smprof-triton-markers-abi{_marker_ptx.ABI_VERSION}"


def _source_hash() -> str:
    h = hashlib.sha256(_KEY.encode())
    here = os.path.dirname(os.path.abspath(__file__))
    for name in ("_marker_ptx.py", "_ptx_rewrite.py", "_markers.py"):
        with open(os.path.join(here, name), "rb") as f:
            h.update(f.read())
    return h.hexdigest()


def install() -> bool:
    """Installs the hook; False when Triton (or its knob) is missing."""
    try:
        from triton import knobs
    except ImportError:
        return False
    runtime = knobs.runtime
    if not hasattr(runtime, "add_stages_inspection_hook"):
        return False
    previous = runtime.add_stages_inspection_hook
    if getattr(previous, "_smprof", False):
        return True
    own_hash = _source_hash()
    own_key = f"{_KEY}-{own_hash[:32]}"

    def hook(backend=None, stages=None, options=None, language=None, capability=None):
        if stages is None:  # our part of the cache keys (in memory: the hash; on disk: the key)
            if previous is None:
                return own_key, own_hash
            key, other = previous()
            return f"{key}+{own_key}", hashlib.sha256(f"{other}:{own_hash}".encode()).hexdigest()
        if previous is not None:
            previous(backend, stages, options, language, capability)
        if "ptx" in stages:
            make_ptx = stages["ptx"]
            stages["ptx"] = lambda src, metadata: _ptx_rewrite.rewrite(make_ptx(src, metadata))
        return None

    hook._smprof = True
    runtime.add_stages_inspection_hook = hook
    return True
