"""The PTX text of one smprof marker in a Triton kernel.

A marker is one `tl.inline_asm_elementwise` statement, run by every thread
of the block (Triton scalars are uniform, so the warp arrives converged).
It records into the same arena, in the same 16-byte format, as the CUDA C++
markers of include/smprof/detail/record.cuh with a profiling context: the
warp's cursor lives in a PTX register declared at function scope by the
prologue that the PTX rewriter (_ptx_rewrite.py) puts at the top of the
kernel, so every marker of the kernel shares it without a value threaded
through the user's code.

The hot path of a recording warp: a clock read, one not-taken uniform
branch on "the cursor is at a chunk boundary" (a predicate computed when the
cursor last moved, so the branch waits for nothing), two ALU ops to build
the event, the cursor's add, one predicated 16-byte store by lane 0 and the
next boundary test. A warp that does not record (no smprof, a warp
SMPROF_WARPS leaves out, a module the kernel filter darkened) takes one
uniform branch over all of it. The cold path (claim a chunk, write its
header, store the event there; arena full; arena seen half published) is
written between `smprof2-cold-begin/end` comments and moved by the rewriter
behind the kernel's last instruction (ptxas lays it out where it likes; see
docs/triton-design.md section 6 for what was measured, and why the claims,
an atomic round trip that stalls the warpgroup, are most of the cost).

Placeholders the rewriter fills in: SMPROF2_ID (a number unique per marker
occurrence in the module: Triton may duplicate a marker when it unrolls or
pipelines a loop) and smprof2_n<hash> (the name's offset in the module's
name table). Every name used is declared by a `// smprof2-name <hash> <hex>`
comment; names are FNV-1a hashed so that equal texts share one table entry.
Nothing here imports Triton: the text is tested on the CPU with ptxas.
"""

from __future__ import annotations

from dataclasses import dataclass

# Kept in step with include/smprof/wire.h (checked by python/tests against
# that header, so a layout change there fails the tests here).
ABI_VERSION = 2
ARENA_SYMBOL = f"_ZN6smprof6detail7g_arenaILi{ABI_VERSION}EEE"
NAME_BASE_SYMBOL = f"_ZN6smprof6detail11g_name_baseILi{ABI_VERSION}EEE"

KIND_BEGIN = 1
KIND_END = 2
KIND_INSTANT = 3
KIND_PHASE = 4
KIND_PHASE_END = 5
KIND_ASYNC_BEGIN = 6
KIND_ASYNC_END = 7
KIND_VALUE_HIGH = 8

FLAG_HAS_VALUE = 1 << 4
FLAG_COUNTER = 1 << 5
FLAG_WIDE_VALUE = 1 << 6
FLAG_NAME_VALUE = 1 << 7

CLOCK_SHIFT = 8
CHUNK_MAGIC = 0xC6
CHUNK_FROM_TRITON = 1 << 1  # wire::kChunkFromTriton: the block is a Triton program

# wire::ArenaRef field offsets, wire::ArenaHeader counter offsets.
REF_ARENA, REF_CHUNKS, REF_NUM_CHUNKS, REF_CHUNK_SHIFT, REF_WARP_MASK = 0, 8, 16, 20, 24
HDR_NEXT_CHUNK, HDR_DROPPED, HDR_UNPLACED = 128, 136, 144
CHUNK_HEADER_BYTES = 48
EVENT_BYTES = 16

# Cursor states besides an event address (multiples of any chunk size, so
# the boundary test sends them to the cold path).
CURSOR_NEEDS_CHUNK = 1 << 63
CURSOR_ARENA_FULL = 1 << 62

PREFIX = "smprof2_"  # every register, label and token the markers use
MARKER_TAG = "// smprof2-marker-begin"  # opens every marker's text
MARKER_BEGIN = MARKER_TAG + " SMPROF2_ID"
MARKER_END = "// smprof2-marker-end"
COLD_BEGIN = "// smprof2-cold-begin"
COLD_END = "// smprof2-cold-end"
NAME_COMMENT = "// smprof2-name"


def fnv1a32(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def name_token(name: str) -> str:
    """The placeholder the rewriter replaces by the name's table offset."""
    return f"{PREFIX}n{fnv1a32(name.encode('utf-8')):08x}"


def name_comment(name: str) -> str:
    data = name.encode("utf-8")
    return f"{NAME_COMMENT} {fnv1a32(data):08x} {data.hex()}"


@dataclass(frozen=True)
class Value:
    """What a marker carries in Event::value.

    `operand` is the asm operand text of a runtime value ("$1"), or None for
    a compile-time one (`constant`); `wide` a 64-bit value (two slots).
    """

    operand: str | None = None
    constant: int = 0
    wide: bool = False


# Registers the prologue declares for every kernel with markers.
def prologue() -> list[str]:
    p = PREFIX
    return [
        "// smprof2: the warp's recording state (python/smprof/triton)",
        f".reg .pred {p}on, {p}st, {p}at_boundary, {p}q;",
        f".reg .b32 {p}mask, {p}t0, {p}t1, {p}t2, {p}t3, {p}t4, {p}t5;",
        f".reg .b64 {p}cur, {p}clk, {p}lo, {p}hi, {p}d0, {p}d1, {p}d2;",
        f"ld.const.u64 {p}d0, [{ARENA_SYMBOL}+{REF_ARENA}];",
        f"ld.const.u32 {p}t0, [{ARENA_SYMBOL}+{REF_WARP_MASK}];",
        f"ld.const.u32 {p}t1, [{ARENA_SYMBOL}+{REF_CHUNK_SHIFT}];",
        f"mov.u32 {p}t2, %tid.x;",
        f"shr.u32 {p}t2, {p}t2, 5;",
        f"min.u32 {p}t2, {p}t2, 31;",
        f"shr.b32 {p}t0, {p}t0, {p}t2;",
        f"and.b32 {p}t0, {p}t0, 1;",
        f"redux.sync.max.u32 {p}t0, {p}t0, -1;",  # the same in every lane: now ptxas knows
        f"setp.ne.u64 {p}on, {p}d0, 0;",
        f"setp.ne.and.u32 {p}on, {p}t0, 0, {p}on;",
        f"mov.u32 {p}t3, %laneid;",
        f"setp.eq.and.u32 {p}st, {p}t3, 0, {p}on;",
        f"shl.b32 {p}mask, 1, {p}t1;",
        f"sub.u32 {p}mask, {p}mask, 1;",
        f"mov.b64 {p}cur, {CURSOR_NEEDS_CHUNK:#x};",
        f"setp.ne.u64 {p}at_boundary, {p}cur, 0;",
        "// smprof2: end of prologue",
    ]


def _boundary_test() -> list[str]:
    """at_boundary := the cursor is at a chunk boundary (or in a state), for
    the next marker. Off the critical path: nothing waits for it until then."""
    p = PREFIX
    return [
        f"cvt.u32.u64 {p}t0, {p}cur;",
        f"and.b32 {p}t0, {p}t0, {p}mask;",
        f"setp.eq.u32 {p}at_boundary, {p}t0, 0;",
    ]


def _cold_path(store: list[str]) -> list[str]:
    """Claims a chunk and stores the event there (or counts a drop). The
    store is repeated here rather than jumped back to, so the hot path is
    one block that falls through to the marker's end."""
    p = PREFIX
    a = ARENA_SYMBOL
    lid = f"{p}L" + "SMPROF2_ID"
    return [
        COLD_BEGIN,
        f"{lid}_cold:",
        f"setp.eq.u64 {p}q, {p}cur, {CURSOR_ARENA_FULL:#x};",
        f"@{p}q bra.uni {lid}_drop;",
        f"ld.const.u64 {p}d0, [{a}+{REF_CHUNKS}];",
        f"ld.const.u32 {p}t0, [{a}+{REF_NUM_CHUNKS}];",
        f"setp.eq.u64 {p}q, {p}d0, 0;",
        f"setp.eq.or.u32 {p}q, {p}t0, 0, {p}q;",
        f"@{p}q bra.uni {lid}_unplaced;",
        f"ld.const.u64 {p}d1, [{a}+{REF_ARENA}];",
        f"mov.u32 {p}t1, 0;",
        f"@{p}st atom.relaxed.gpu.global.add.u32 {p}t1, [{p}d1+{HDR_NEXT_CHUNK}], 1;",
        f"redux.sync.max.u32 {p}t1, {p}t1, -1;",  # lane 0's claim, to every lane (uniform)
        f"setp.ge.u32 {p}q, {p}t1, {p}t0;",
        f"@{p}q bra.uni {lid}_full;",
        f"ld.const.u32 {p}t2, [{a}+{REF_CHUNK_SHIFT}];",
        f"cvt.u64.u32 {p}d2, {p}t1;",
        f"shl.b64 {p}d2, {p}d2, {p}t2;",
        f"add.u64 {p}d0, {p}d0, {p}d2;",
        # ChunkHeader: %gridid, name base; block; SM, warp, magic, %warpid, flags; clock anchor.
        f"mov.u64 {p}d1, %gridid;",
        f"mov.u64 {p}d2, {NAME_BASE_SYMBOL};",
        f"cvta.global.u64 {p}d2, {p}d2;",
        f"@{p}st st.global.v2.u64 [{p}d0], {{{p}d1, {p}d2}};",
        f"mov.u32 {p}t0, %ctaid.x;",
        f"mov.u32 {p}t1, %ctaid.y;",
        f"mov.u32 {p}t2, %ctaid.z;",
        f"shl.b32 {p}t2, {p}t2, 16;",
        f"or.b32 {p}t1, {p}t1, {p}t2;",
        f"mov.b64 {p}d1, {{{p}t0, {p}t1}};",
        f"mov.u32 {p}t0, %smid;",
        f"and.b32 {p}t0, {p}t0, 65535;",
        f"mov.u32 {p}t1, %tid.x;",
        f"shr.u32 {p}t1, {p}t1, 5;",
        f"shl.b32 {p}t1, {p}t1, 16;",
        f"or.b32 {p}t0, {p}t0, {p}t1;",
        f"or.b32 {p}t0, {p}t0, {CHUNK_MAGIC << 24:#x};",
        f"mov.u32 {p}t1, %warpid;",
        f"and.b32 {p}t1, {p}t1, 255;",
        f"or.b32 {p}t1, {p}t1, {CHUNK_FROM_TRITON << 8:#x};",
        f"mov.b64 {p}d2, {{{p}t0, {p}t1}};",
        f"@{p}st st.global.v2.u64 [{p}d0+16], {{{p}d1, {p}d2}};",
        f"mov.u64 {p}d1, %clock64;",
        f"mov.u64 {p}d2, %globaltimer;",
        f"@{p}st st.global.v2.u64 [{p}d0+32], {{{p}d1, {p}d2}};",
        f"add.u64 {p}cur, {p}d0, {CHUNK_HEADER_BYTES};",
        *store,
        f"bra.uni {lid}_done;",
        f"{lid}_full:",
        f"mov.b64 {p}cur, {CURSOR_ARENA_FULL:#x};",
        f"setp.ne.u64 {p}at_boundary, {p}cur, 0;",
        f"{lid}_drop:",
        f"ld.const.u64 {p}d1, [{a}+{REF_ARENA}];",
        f"@{p}st red.relaxed.gpu.global.add.u64 [{p}d1+{HDR_DROPPED}], 1;",
        f"bra.uni {lid}_done;",
        f"{lid}_unplaced:",
        f"ld.const.u64 {p}d1, [{a}+{REF_ARENA}];",
        f"@{p}st red.relaxed.gpu.global.add.u64 [{p}d1+{HDR_UNPLACED}], 1;",
        f"bra.uni {lid}_done;",
        COLD_END,
    ]


def _value_words(value: Value) -> tuple[list[str], str, str]:
    """Instructions that put the value's low and high words in registers
    (t2/t3 or t5), and the registers (or operand) that hold them."""
    p = PREFIX
    if value.operand is None:
        c = value.constant & 0xFFFFFFFFFFFFFFFF
        pre = [f"mov.b32 {p}t5, {c & 0xFFFFFFFF};"]
        if value.wide:
            pre.append(f"mov.b32 {p}t3, {c >> 32};")
        return pre, f"{p}t5", f"{p}t3"
    if value.wide:
        return [f"mov.b64 {{{p}t2, {p}t3}}, {value.operand};"], f"{p}t2", f"{p}t3"
    return [], value.operand, ""


def _store(kind_flags: int, name: str, value: Value, late: bool) -> list[str]:
    """Stamps (a BEGIN: here, after the marker's own work), stores the event
    at the cursor (lane 0), advances the cursor, tests the next boundary."""
    p = PREFIX
    slots = 2 if value.wide else 1
    pre, vlo, vhi = _value_words(value)
    lines = [f"mov.u64 {p}clk, %clock64;"] if late else []
    lines += pre
    lines += [
        f"mov.b64 {{{p}t0, {p}t1}}, {p}clk;",
        f"shl.b32 {p}t1, {p}t1, {CLOCK_SHIFT};",
        f"or.b32 {p}t1, {p}t1, {kind_flags};",
        f"mov.b64 {p}lo, {{{p}t0, {p}t1}};",
        f"mov.b32 {p}t4, {name_token(name)};",
        f"mov.b64 {p}hi, {{{p}t4, {vlo}}};",
        # The cursor moves first and the store addresses back from it: the
        # store then needs no copy of the old cursor (two moves fewer).
        f"add.u64 {p}cur, {p}cur, {EVENT_BYTES * slots};",
        f"@{p}st st.global.v2.u64 [{p}cur+{-EVENT_BYTES * slots}], {{{p}lo, {p}hi}};",
    ]
    if slots == 2:
        # The continuation slot: the event's clock, kind VALUE_HIGH, no name,
        # the value's bits 32-63.
        lines += [
            f"and.b32 {p}t1, {p}t1, {0xFFFFFF00:#x};",
            f"or.b32 {p}t1, {p}t1, {KIND_VALUE_HIGH};",
            f"mov.b64 {p}lo, {{{p}t0, {p}t1}};",
            f"mov.b32 {p}t4, 0;",
            f"mov.b64 {p}hi, {{{p}t4, {vhi}}};",
            f"@{p}st st.global.v2.u64 [{p}cur+{-EVENT_BYTES}], {{{p}lo, {p}hi}};",
        ]
    return lines + _boundary_test()


def marker(kind: int, flags: int, name: str, value: Value = Value()) -> str:
    """The asm text of one marker: `kind` | `flags` (wire.h), name, value.

    Operand $0 is a dummy 32-bit output (Triton's inline asm has a result);
    a runtime value is $1.
    """
    if not 1 <= kind < KIND_VALUE_HIGH:
        raise ValueError(f"marker kind {kind} is not an event kind")
    p = PREFIX
    lid = f"{p}L" + "SMPROF2_ID"
    slots = 2 if value.wide else 1
    kind_flags = kind | flags | (FLAG_WIDE_VALUE if value.wide else 0)
    late = kind == KIND_BEGIN  # a BEGIN is stamped after the marker's own work
    # `on` derives from constant memory and a warp reduction (redux.sync),
    # which ptxas can tell is the same in every lane: its branch needs no
    # convergence barrier (BSSY/BSYNC, seen in the SASS). The boundary
    # branch still gets one: ptxas cannot tell that the cursor is uniform.
    lines = [MARKER_BEGIN, name_comment(name), f"@!{p}on bra.uni {lid}_done;"]
    if not late:
        lines.append(f"mov.u64 {p}clk, %clock64;")
    if slots == 1:
        # `at_boundary` was computed when the cursor last moved, so the
        # branch waits for nothing.
        lines.append(f"@{p}at_boundary bra.uni {lid}_cold;")
    else:  # a wide value's pair never straddles a chunk boundary: one slot left is not enough
        lines += [
            f"cvt.u32.u64 {p}t0, {p}cur;",
            f"add.u32 {p}t1, {p}t0, {EVENT_BYTES};",
            f"and.b32 {p}t1, {p}t1, {p}mask;",
            f"setp.eq.or.u32 {p}q, {p}t1, 0, {p}at_boundary;",
            f"@{p}q bra.uni {lid}_cold;",
        ]
    store = _store(kind_flags, name, value, late)
    lines += store
    lines += [f"{lid}_done:", "mov.u32 $0, 0;"]
    lines += _cold_path(store)
    lines.append(MARKER_END)
    return "\n".join(lines)
