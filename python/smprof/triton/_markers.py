"""The markers a @triton.jit kernel calls: Triton builtins that emit one
inline-asm statement each (_marker_ptx.py has the PTX, and why).

They run at compile time, in Triton's code generator (which passes
`_semantic`), like `tl.load`. `prof` is the kernel's smprof argument: a
pointer (sp.buffer()) keeps the markers, None removes them at compile
time (Triton specialises a None argument into a constant). Names are
compile-time strings; values are scalars of an integer type (a 64-bit one
takes a second slot) or compile-time integers.

Every marker takes the options of CUDA C++'s markers for who records:
`on_warp=w`, `on_warps=(first, count)` (warps of each block, compile-time
integers), `per_block=True` (= on_warp=0) and `when=cond` (a scalar, or a
compile-time bool); several combine with "and", and SMPROF_WARPS applies on
top.
"""

from __future__ import annotations

from triton.language import core as tl

from smprof.triton import _marker_ptx as mp


def _unwrap(x):
    return x.value if isinstance(x, tl.constexpr) else x


def _records(prof) -> bool:
    prof = _unwrap(prof)
    if prof is None:
        return False
    ty = getattr(prof, "type", None)
    if not isinstance(prof, tl.tensor) or not isinstance(ty, tl.pointer_type):
        raise TypeError(f"smprof: `prof` must be the kernel argument given sp.buffer() (or None), not {prof!r}")
    return True


def _name(name, what: str) -> str:
    name = _unwrap(name)
    if not isinstance(name, str):
        raise TypeError(f"smprof: the name of {what} must be a compile-time string "
                        f"(a literal or a tl.constexpr), not {name!r}")
    return name


def _value(v, what: str, _semantic):
    """(mp.Value, asm args) for a value: a runtime scalar or a constant."""
    v = _unwrap(v)
    if isinstance(v, bool):
        v = int(v)
    if isinstance(v, int):
        if not -(1 << 63) <= v < (1 << 64):
            raise ValueError(f"smprof: {what} {v} does not fit 64 bits")
        return mp.Value(constant=v, wide=not -(1 << 31) <= v < (1 << 32)), []
    if not isinstance(v, tl.tensor):
        raise TypeError(f"smprof: {what} must be an integer scalar or a compile-time int, not {v!r}")
    if v.type.is_block():
        raise TypeError(f"smprof: {what} must be a scalar, not a block of shape {v.shape} "
                        "(reduce it first, e.g. tl.sum or tl.max)")
    sca = v.dtype
    if sca.is_ptr():
        return mp.Value(operand="$1", wide=True), [v.to(tl.int64, bitcast=False, _semantic=_semantic)]
    if not sca.is_int() and not sca.is_bool():
        raise TypeError(f"smprof: {what} must be an integer, not {sca} (values are integers; scale "
                        "a float, e.g. (x * 1000).to(tl.int32))")
    if sca.primitive_bitwidth == 64:
        return mp.Value(operand="$1", wide=True), [v]
    if sca.primitive_bitwidth < 32 or sca.is_bool():
        v = v.to(tl.int32, _semantic=_semantic)
    return mp.Value(operand="$1"), [v]


def _value32(v, what: str, why: str, _semantic):
    """_value() for the operands that fill a 32-bit slot (a name's %d, a
    token); `why` ends the error for a 64-bit one."""
    value, args = _value(v, what, _semantic)
    if value.wide:
        raise TypeError(f"smprof: {what} is a 32-bit integer ({why})")
    return value, args


class _Who:
    """A marker's "who records" options (see the module's comment)."""

    def __init__(self, on_warp=None, on_warps=None, per_block=False, when=None):
        self.on_warp, self.on_warps = _unwrap(on_warp), _unwrap(on_warps)
        self.per_block, self.when = _unwrap(per_block), _unwrap(when)

    def guard(self, what: str, operand: int, _semantic):
        """(mp.Guard or None, asm args; False when no warp ever records the
        marker: then it compiles to nothing). `operand` is the asm operand
        number a runtime condition gets."""
        lo, hi = 0, None  # warps lo .. hi - 1 (hi None: no bound)
        ranges = []
        if self.on_warp is not None:
            ranges.append((self.on_warp, 1, "on_warp="))
        if self.on_warps is not None:
            w = self.on_warps
            if isinstance(w, tl.tuple):  # a tuple written in the kernel: Triton's, of constexprs
                w = tuple(_unwrap(x) for x in w.values)
            if isinstance(w, (tuple, list)):
                w = tuple(_unwrap(x) for x in w)
            if not (isinstance(w, tuple) and len(w) == 2):
                raise TypeError(f"smprof: on_warps= of {what} takes (first, count), not {w!r}")
            ranges.append((w[0], w[1], "on_warps="))
        if not isinstance(self.per_block, bool):
            raise TypeError(f"smprof: per_block= of {what} is True or False, not {self.per_block!r}")
        if self.per_block:
            ranges.append((0, 1, "per_block="))
        for first, count, opt in ranges:
            if not (isinstance(first, int) and isinstance(count, int)) or isinstance(first, bool) or first < 0 \
                    or count < 1:
                raise TypeError(f"smprof: {opt} of {what} takes compile-time warp indices (first >= 0, "
                                f"count >= 1), not {(first, count) if opt == 'on_warps=' else first!r}")
            lo, hi = max(lo, first), first + count if hi is None else min(hi, first + count)
        if hi is not None and hi <= lo:
            return False
        when, args = self.when, []
        if isinstance(when, bool):
            if not when:
                return False
            when = None
        elif when is not None:
            if not isinstance(when, tl.tensor) or when.type.is_block():
                raise TypeError(f"smprof: when= of {what} takes a scalar condition or a compile-time bool, "
                                f"not {when!r} (reduce a block first, e.g. tl.max)")
            if not (when.dtype.is_int() or when.dtype.is_bool()):
                raise TypeError(f"smprof: when= of {what} takes an integer or boolean scalar, not {when.dtype}")
            if when.dtype.primitive_bitwidth > 32:  # != 0 first: truncating would lose the high bits
                when = when.to(tl.int1, _semantic=_semantic)
            if when.dtype.primitive_bitwidth != 32:
                when = when.to(tl.int32, _semantic=_semantic)
            args = [when]
            when = f"${operand}"
        if hi is None and when is None:
            return None, []
        return mp.Guard(lo, None if hi is None else hi - lo, when), args


def _emit(kind: int, flags: int, name: str, value: mp.Value | None, args, who: _Who, what: str,
          _semantic) -> None:
    guard = who.guard(what, 1 + len(args), _semantic)
    if guard is False:
        return
    guard, guard_args = guard
    asm = mp.marker(kind, flags, name, value, guard)
    constraints = "=r"
    if value is not None and value.operand is not None:
        constraints += "," + ("l" if value.wide else "r")
    constraints += ",r" * len(guard_args)
    tl.inline_asm_elementwise(asm, constraints, args + guard_args, dtype=tl.int32, is_pure=False, pack=1,
                              _semantic=_semantic)


def _mark(prof, kind: int, name, what: str, _semantic, value=None, arg=None, counter=False, who=None) -> None:
    if not _records(prof):
        return
    text = _name(name, what)
    value = _unwrap(value)
    arg = _unwrap(arg)
    if value is not None and arg is not None:
        raise TypeError(f"smprof: {what} takes value= or arg=, not both (arg formats the name)")
    flags = 0
    if arg is not None:
        v, args = _value32(arg, "arg=", "it fills a %d in the name", _semantic)
        flags = mp.FLAG_NAME_VALUE
    elif value is not None:
        v, args = _value(value, "value", _semantic)
        flags = mp.FLAG_HAS_VALUE | (mp.FLAG_COUNTER if counter else 0)
    else:
        v, args = None, []
    _emit(kind, flags, text, v, args, who or _Who(), what, _semantic)


@tl.builtin
def begin(prof, name, arg=None, on_warp=None, on_warps=None, per_block=False, when=None, _semantic=None):
    """Opens the range `name` for this warp (closed by end(prof, name))."""
    _mark(prof, mp.KIND_BEGIN, name, "begin", _semantic, arg=arg, who=_Who(on_warp, on_warps, per_block, when))


@tl.builtin
def end(prof, name, value=None, arg=None, on_warp=None, on_warps=None, per_block=False, when=None, _semantic=None):
    """Closes the latest open range `name`; `value` is shown with it."""
    _mark(prof, mp.KIND_END, name, "end", _semantic, value=value, arg=arg, who=_Who(on_warp, on_warps, per_block, when))


@tl.builtin
def instant(prof, name, value=None, arg=None, on_warp=None, on_warps=None, per_block=False, when=None,
            _semantic=None):
    """A point in time, with an optional integer `value`."""
    _mark(prof, mp.KIND_INSTANT, name, "instant", _semantic, value=value, arg=arg,
          who=_Who(on_warp, on_warps, per_block, when))


@tl.builtin
def counter(prof, name, value, on_warp=None, on_warps=None, per_block=False, when=None, _semantic=None):
    """A sample of the counter `name` (a counter track per warp)."""
    if _unwrap(value) is None:
        raise TypeError("smprof: counter(prof, name, value) needs a value")
    _mark(prof, mp.KIND_INSTANT, name, "counter", _semantic, value=value, counter=True,
          who=_Who(on_warp, on_warps, per_block, when))


@tl.builtin
def phase(prof, name, arg=None, on_warp=None, on_warps=None, per_block=False, when=None, _semantic=None):
    """Ends the warp's open phase (if any) and starts phase `name`."""
    _mark(prof, mp.KIND_PHASE, name, "phase", _semantic, arg=arg, who=_Who(on_warp, on_warps, per_block, when))


@tl.builtin
def phase_end(prof, on_warp=None, on_warps=None, per_block=False, when=None, _semantic=None):
    """Ends the warp's open phase."""
    _mark(prof, mp.KIND_PHASE_END, "", "phase_end", _semantic, who=_Who(on_warp, on_warps, per_block, when))


def _async(prof, kind: int, name, token, what: str, who: _Who, _semantic) -> None:
    if not _records(prof):
        return
    text = _name(name, what)
    v, args = _value32(token, f"the token of {what}", "a span's token", _semantic)
    _emit(kind, 0, text, v, args, who, what, _semantic)


@tl.builtin
def async_begin(prof, name, token, on_warp=None, on_warps=None, per_block=False, when=None, _semantic=None):
    """Opens span `name` with `token`; any warp of the block may close it."""
    _async(prof, mp.KIND_ASYNC_BEGIN, name, token, "async_begin", _Who(on_warp, on_warps, per_block, when),
           _semantic)


@tl.builtin
def async_end(prof, name, token, on_warp=None, on_warps=None, per_block=False, when=None, _semantic=None):
    """Closes the span `name` opened with `token` in this block."""
    _async(prof, mp.KIND_ASYNC_END, name, token, "async_end", _Who(on_warp, on_warps, per_block, when),
           _semantic)


class range:  # noqa: A001 - the name users write: `with sp.range(prof, "mma"):`
    """`with sp.range(prof, "mma"):` - begin on entry, end on exit.

    Triton runs a `with` statement at compile time and passes `_semantic` to
    the context manager's constructor.
    """

    def __init__(self, prof, name, arg=None, on_warp=None, on_warps=None, per_block=False, when=None,
                 _semantic=None):
        self.prof = prof
        self.name = name
        self.options = dict(arg=arg, on_warp=on_warp, on_warps=on_warps, per_block=per_block, when=when)
        self.semantic = _semantic

    def __enter__(self):
        begin(self.prof, self.name, **self.options, _semantic=self.semantic)
        return self

    def __exit__(self, exc_type, exc, tb):
        end(self.prof, self.name, **self.options, _semantic=self.semantic)
        return False
