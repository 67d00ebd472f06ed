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
cursor last moved, so the branch waits for nothing: the markers' cost is
latency in the warp's instruction stream, which on Hopper holds up the
warpgroup's wgmma), two ALU ops to build the event, one predicated 16-byte
store by lane 0, the cursor's add and the next boundary test. A warp
that does not record (no smprof, a warp SMPROF_WARPS leaves out, a module the
kernel filter darkened) takes one uniform branch over all of it. The cold
path (claim a chunk, write its header; arena full; arena seen half
published) is written between `smprof2-cold-begin/end` comments and moved by
the rewriter behind the kernel's last instruction, so the hot path stays
straight-line code.

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
MARKER_BEGIN = "// smprof2-marker-begin SMPROF2_ID"
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
        f".reg .pred {p}on, {p}l0, {p}st, {p}ok, {p}at_boundary, {p}q;",
        f".reg .b32 {p}mask, {p}ret, {p}t0, {p}t1, {p}t2, {p}t3, {p}t4, {p}t5;",
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
        f"setp.eq.and.u32 {p}l0, {p}t3, 0, {p}on;",
        f"mov.pred {p}st, {p}l0;",
        f"setp.ne.and.u64 {p}ok, {p}d0, 0, {p}on;",
        f"shl.b32 {p}mask, 1, {p}t1;",
        f"sub.u32 {p}mask, {p}mask, 1;",
        f"mov.b64 {p}cur, {CURSOR_NEEDS_CHUNK:#x};",
        f"setp.ne.u64 {p}at_boundary, {p}cur, 0;",
        "// smprof2: end of prologue",
    ]


def _boundary_test() -> list[str]:
    """at_boundary := the cursor is at a chunk boundary, or the last claim
    failed (the claim routine then counts the event), for the next marker.
    Off the critical path: nothing waits for it until then."""
    p = PREFIX
    return [
        f"cvt.u32.u64 {p}t0, {p}cur;",
        f"and.b32 {p}t0, {p}t0, {p}mask;",
        f"setp.eq.or.u32 {p}at_boundary, {p}t0, 0, !{p}ok;",
    ]


CLAIM_LABEL = f"{PREFIX}claim"
TARGETS_LABEL = f"{PREFIX}returns"


def _chunk_header(index: str) -> list[str]:
    """Writes (lane 0: `l0`) the ChunkHeader of chunk `index` (a .b32
    register) and leaves the chunk's address in d0. Needs d0 = chunk 0's
    address."""
    p = PREFIX
    a = ARENA_SYMBOL
    return [
        f"ld.const.u32 {p}t2, [{a}+{REF_CHUNK_SHIFT}];",
        f"cvt.u64.u32 {p}d2, {index};",
        f"shl.b64 {p}d2, {p}d2, {p}t2;",
        f"add.u64 {p}d0, {p}d0, {p}d2;",
        # %gridid, name base; block; SM, warp, magic, %warpid, flags; clock anchor.
        f"mov.u64 {p}d1, %gridid;",
        f"mov.u64 {p}d2, {NAME_BASE_SYMBOL};",
        f"cvta.global.u64 {p}d2, {p}d2;",
        f"@{p}l0 st.global.v2.u64 [{p}d0], {{{p}d1, {p}d2}};",
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
        f"@{p}l0 st.global.v2.u64 [{p}d0+16], {{{p}d1, {p}d2}};",
        f"mov.u64 {p}d1, %clock64;",
        f"mov.u64 {p}d2, %globaltimer;",
        f"@{p}l0 st.global.v2.u64 [{p}d0+32], {{{p}d1, {p}d2}};",
    ]


def claim_routine(returns: list[str]) -> list[str]:
    """The kernel's one claim routine, which every marker's cold stub jumps
    to with its index in `returns` (its resume label) in `ret`.

    Takes a chunk, writes its header and points the cursor after it (ok;
    st = lane 0); or counts the event as dropped (arena full: the cursor
    keeps its "full" bit, and every later event is counted too) or unplaced
    (the arena reference seen half published: the next marker tries
    again), with ok and st false (every later marker comes back here);
    then returns to the marker, which stores the event where st.

    Claims are the markers' main cost: the atomic's round trip (about a
    microsecond) stalls the warp, and on Hopper its warpgroup's wgmma with
    it (a 4096^3 matmul with 4 markers per K iteration: 1.15x with the
    default 1 KiB chunks, 1.015x for one warp per warpgroup with 64 KiB
    chunks, one claim per warp). A version that claimed the next chunk
    ahead to hide the round trip needed 128 registers instead of 116 and
    ran slower (1.25x); docs/performance.md has the measurements. One copy
    per kernel keeps the loops the markers sit in small: with a cold path
    at every marker, ptxas laid the cold code out inside the loop, behind a
    taken branch and convergence barriers at every marker.
    """
    p = PREFIX
    a = ARENA_SYMBOL
    back = f"brx.idx.uni {p}ret, {TARGETS_LABEL};"
    return [
        f"// smprof2: the claim routine ({len(returns)} markers)",
        f"{TARGETS_LABEL}: .branchtargets {', '.join(returns)};",
        f"{CLAIM_LABEL}:",
        f"ld.const.u64 {p}d1, [{a}+{REF_ARENA}];",
        # Full: the cursor's "full" bit (markers went on adding to it).
        f"and.b64 {p}d2, {p}cur, {CURSOR_ARENA_FULL:#x};",
        f"setp.ne.u64 {p}q, {p}d2, 0;",
        f"@{p}q bra.uni {p}drop;",
        f"ld.const.u64 {p}d0, [{a}+{REF_CHUNKS}];",
        f"ld.const.u32 {p}t0, [{a}+{REF_NUM_CHUNKS}];",
        f"setp.eq.u64 {p}q, {p}d0, 0;",
        f"setp.eq.or.u32 {p}q, {p}t0, 0, {p}q;",
        f"@{p}q bra.uni {p}unplaced;",
        f"mov.u32 {p}t1, 0;",
        f"@{p}l0 atom.relaxed.gpu.global.add.u32 {p}t1, [{p}d1+{HDR_NEXT_CHUNK}], 1;",
        f"redux.sync.max.u32 {p}t1, {p}t1, -1;",  # lane 0's claim, to every lane (uniform)
        f"setp.ge.u32 {p}q, {p}t1, {p}t0;",
        f"@{p}q bra.uni {p}full;",
        *_chunk_header(f"{p}t1"),
        f"add.u64 {p}cur, {p}d0, {CHUNK_HEADER_BYTES};",
        f"setp.ne.u64 {p}ok, {p}cur, 0;",
        f"mov.pred {p}st, {p}l0;",
        back,
        f"{p}full:",
        f"mov.b64 {p}cur, {CURSOR_ARENA_FULL:#x};",
        f"{p}drop:",
        f"@{p}l0 red.relaxed.gpu.global.add.u64 [{p}d1+{HDR_DROPPED}], 1;",
        f"bra.uni {p}failed;",
        f"{p}unplaced:",
        f"@{p}l0 red.relaxed.gpu.global.add.u64 [{p}d1+{HDR_UNPLACED}], 1;",
        f"{p}failed:",  # the event is not stored; the next marker comes back here
        f"setp.eq.u64 {p}ok, {p}d1, 0;",  # false
        f"mov.pred {p}st, {p}ok;",
        back,
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


def marker(kind: int, flags: int, name: str, value: Value = Value()) -> str:
    """The asm text of one marker: `kind` | `flags` (wire.h), name, value.

    Operand $0 is a dummy 32-bit output (Triton's inline asm has a result);
    a runtime value is $1. Its cold stub (between COLD_BEGIN/END) sets the
    marker's resume index (SMPROF2_IDX, filled in by the rewriter) and
    jumps to the kernel's claim routine.
    """
    if not 1 <= kind < KIND_VALUE_HIGH:
        raise ValueError(f"marker kind {kind} is not an event kind")
    p = PREFIX
    lid = f"{p}L" + "SMPROF2_ID"
    slots = 2 if value.wide else 1
    kind_flags = kind | flags | (FLAG_WIDE_VALUE if value.wide else 0)
    late = kind == KIND_BEGIN  # a BEGIN is stamped after the marker's own work
    pre, vlo, vhi = _value_words(value)
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
    lines.append(f"{lid}_back:")
    if late:
        lines.append(f"mov.u64 {p}clk, %clock64;")
    lines += pre
    lines += [
        f"mov.b64 {{{p}t0, {p}t1}}, {p}clk;",
        f"shl.b32 {p}t1, {p}t1, {CLOCK_SHIFT};",
        f"or.b32 {p}t1, {p}t1, {kind_flags};",
        f"mov.b64 {p}lo, {{{p}t0, {p}t1}};",
        f"mov.b32 {p}t4, {name_token(name)};",
        f"mov.b64 {p}hi, {{{p}t4, {vlo}}};",
        f"@{p}st st.global.v2.u64 [{p}cur], {{{p}lo, {p}hi}};",
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
            f"@{p}st st.global.v2.u64 [{p}cur+{EVENT_BYTES}], {{{p}lo, {p}hi}};",
        ]
    lines.append(f"add.u64 {p}cur, {p}cur, {EVENT_BYTES * slots};")
    lines += _boundary_test()
    lines += [
        f"{lid}_done:",
        "mov.u32 $0, 0;",
        COLD_BEGIN,
        f"{lid}_cold:",
        f"mov.u32 {p}ret, SMPROF2_IDX;",
        f"bra.uni {CLAIM_LABEL};",
        COLD_END,
        MARKER_END,
    ]
    return "\n".join(lines)
