"""The PTX text of one smprof marker in a Triton kernel.

A marker is one `tl.inline_asm_elementwise` statement, run by every thread
of the block (Triton scalars are uniform, so the warp arrives converged).
It records into the same arena as the CUDA C++ markers of
include/smprof/detail/record.cuh, in chunks of their own format
(wire::kChunkCompact): after the usual chunk header, 8-byte
wire::CompactEvents, {%clock, tag}, the tag being the name's offset << 8 |
kind | flags; a marker with a value fills a second slot with it. The warp's
cursor lives in a PTX register declared at function scope by the prologue
that the PTX rewriter (_ptx_rewrite.py) puts at the top of the kernel, so
every marker of the kernel shares it without a value threaded through the
user's code.

The room test and the cursor's advance are paid once per run of markers:
the rewriter gives the first marker of every run in straight-line code (no
label, no branch between them) the test for the whole run's slots and a
32-bit add that moves the cursor past them all, and every marker of the run
stores at a fixed distance back from it. Stores are what a recording warp
pays most for, so the rewriter also joins them: two events that share a
16-byte unit of the run go out in one 128-bit store (the first is held in
two registers until the second marker), as do an event and its value. So
the hot path of a recording warp is a clock read, the tag's move and, every
other marker, one predicated 128-bit store by lane 0; plus, at a run's first
marker, the test, the add and one branch not taken. A warp that does not
record (no smprof, a warp SMPROF_WARPS leaves out, a module the kernel
filter darkened) takes one uniform branch over each marker. A marker with
"who records" options (Guard: on_warps, when) tests them in that branch and
is a run of its own. The cold path
(claim a chunk, write its header, store the event there; arena full: count
the run's events lost; arena seen half published: count them unplaced) is
written between `smprof2-cold-begin/end` comments and moved by the rewriter
behind the kernel's last instruction (docs/triton-design.md sections 6-9 say
what was measured). A recording warp's first claim is made in the prologue,
where its round trip overlaps the kernel's start, and taken by its first
cold path (prologue(); section 14).

Placeholders the rewriter fills in: SMPROF2_ID (a number unique per marker
occurrence in the module: Triton may duplicate a marker when it unrolls or
pipelines a loop), SMPROF2_ROOM / SMPROF2_RUN_BYTES / SMPROF2_EVENTS (the
bytes the run's check asks for, the run's bytes, its events),
SMPROF2_BACK / SMPROF2_VALUE_BACK / SMPROF2_PAIR_BACK (how far back from the
advanced cursor the marker's event, its value and a held event go) and
smprof2_g<hash>x<kind_flags> (the event's tag, from the name's offset in the
module's name table). Every name used is declared by a
`// smprof2-name <hash> <hex>` comment; names are FNV-1a hashed so that
equal texts share one table entry. Nothing here imports Triton: the text is
tested on the CPU with ptxas.
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

CHUNK_MAGIC = 0xC6
CHUNK_FROM_TRITON = 1 << 1  # wire::kChunkFromTriton: the block is a Triton program
CHUNK_COMPACT = 1 << 2  # wire::kChunkCompact: 8-byte wire::CompactEvents

# wire::ArenaRef field offsets, wire::ArenaHeader counter offsets.
REF_ARENA, REF_CHUNKS, REF_NUM_CHUNKS, REF_CHUNK_SHIFT, REF_WARP_MASK = 0, 8, 16, 20, 24
HDR_NEXT_CHUNK, HDR_DROPPED, HDR_UNPLACED = 128, 136, 144
CHUNK_HEADER_BYTES = 48
EVENT_BYTES = 8  # a wire::CompactEvent
NAME_SHIFT = 8  # wire::kCompactNameShift
NAME_LIMIT = 1 << 23  # wire::kCompactNameLimit
VALUE_FOLLOWS = 1 << 31  # wire::kCompactValueFollows
MIN_CHUNK_BYTES = 256  # wire::ArenaHeader::chunk_bytes: 256 .. 65536
# One check covers at most this many slots: what the smallest chunk holds
# (its last slot is never filled, and a run with joined stores may start one
# slot later and end on a 16-byte boundary: see ALIGN_RUN).
MAX_RUN_SLOTS = (MIN_CHUNK_BYTES - CHUNK_HEADER_BYTES) // EVENT_BYTES - 2
UNIT_BYTES = 16  # what a joined store writes

# Cursor states besides an event address, in its high word (a state's low
# word is 0 when a run's check reads it, so the check sends it to the cold
# path; see _state).
CURSOR_NEEDS_CHUNK = 1 << 63
CURSOR_ARENA_FULL = 1 << 62

PREFIX = "smprof2_"  # every register, label and token the markers use
MARKER_TAG = "// smprof2-marker-begin"  # opens every marker's text
MARKER_BEGIN = MARKER_TAG + " SMPROF2_ID"
MARKER_END = "// smprof2-marker-end"
COLD_BEGIN = "// smprof2-cold-begin"
CHECK_BEGIN = "// smprof2-check-begin"
CHECK_END = "// smprof2-check-end"
SLOTS_COMMENT = "// smprof2-slots"
GUARDED_COMMENT = "// smprof2-guarded"  # a marker with its own "who records" test: a run of its own
ADVANCE_BEGIN = "// smprof2-advance-begin"
ADVANCE_END = "// smprof2-advance-end"
COLD_END = "// smprof2-cold-end"
NAME_COMMENT = "// smprof2-name"
CLUSTER_SHAPE = "// smprof2-cluster-shape"  # where the rewriter reads the cluster's shape (sm_90 on)


def fnv1a32(data: bytes) -> int:
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def tag_token(name: str, kind_flags: int) -> str:
    """The placeholder the rewriter replaces by the event's tag: the name's
    table offset << NAME_SHIFT | kind_flags (| VALUE_FOLLOWS)."""
    return f"{PREFIX}g{fnv1a32(name.encode('utf-8')):08x}x{kind_flags:08x}"


def name_comment(name: str) -> str:
    data = name.encode("utf-8")
    return f"{NAME_COMMENT} {fnv1a32(data):08x} {data.hex()}"


@dataclass(frozen=True)
class Value:
    """The value a marker carries in the slot after its event.

    `operand` is the asm operand text of a runtime value ("$1"), or None for
    a compile-time one (`constant`); `wide` a 64-bit value (the event says
    so, and the reader takes the slot's upper half too).
    """

    operand: str | None = None
    constant: int = 0
    wide: bool = False


@dataclass(frozen=True)
class Guard:
    """Which warps of each block record a marker (a marker option, as
    smprof::on_warps / when in CUDA C++): warps `first` .. `first` + `count`
    - 1 (count None: every warp), and only while the runtime scalar operand
    `when` (its asm operand: "$1", or "$2" after a runtime value) is not 0
    (None: always). SMPROF_WARPS applies on top."""

    first: int = 0
    count: int | None = None
    when: str | None = None


def _guard(guard: Guard | None, lid: str) -> list[str]:
    """The branch past a marker for a warp that does not record it: one
    uniform branch on `on` (this warp records at all), or on `on` and the
    marker's own test. Triton's blocks are one-dimensional and its scalars
    the same in every lane, so the test is uniform across the warp."""
    p = PREFIX
    if guard is None:
        return [f"@!{p}on bra.uni {lid}_done;"]
    lines = [GUARDED_COMMENT]
    if guard.count is None:
        lines.append(f"mov.pred {p}q, {p}on;")
    else:
        lines += [f"sub.u32 {p}t2, {p}w, {guard.first};",  # first <= warp < first + count, unsigned
                  f"setp.lt.and.u32 {p}q, {p}t2, {guard.count}, {p}on;"]
    if guard.when is not None:
        lines.append(f"setp.ne.and.u32 {p}q, {guard.when}, 0, {p}q;")
    return lines + [f"@!{p}q bra.uni {lid}_done;"]


# Registers the prologue declares for every kernel with markers.
def prologue(prefetch: bool) -> list[str]:
    """The warp's recording state, at the top of the kernel. With
    `prefetch` (its warps are likely to record: the rewriter's
    _claims_first_chunk_early) a recording warp also claims its first chunk
    here, so the
    atomic's round trip (on Hopper it held the warp, and its warpgroup's
    wgmma with it, at its first marker: 0.6-0.7 points of the bench kernel's
    time) overlaps the kernel's own start; its first cold path takes that
    claim instead of making one. A warp that then reaches no marker leaves
    its chunk zero, which the harvest counts as an empty chunk. The claim is
    made even while the arena is not placed (its chunks still 0): the index
    stays the warp's, and the first cold path after the arena is placed
    uses it (before that, the cold path counts events unplaced and keeps
    it). This form, word for word, is the one measured (a version that
    tested the placement first and kept the pending claim in a register
    instead of a predicate measured no gain: ptxas scheduled the loop
    differently; docs/triton-design.md section 14).

    The warp's index in its block (`w`) is read here once and kept: the
    cold paths' headers and the "who records" tests use it. A cold path
    that read %tid itself made ptxas compute a Hopper loop's wgmma
    descriptors in ordinary registers and move them to uniform ones before
    every HGMMA (R2UR), 3.4 points of the bench kernel's time on H200 (section
    15)."""
    p = PREFIX
    claim = [
        f"mov.pred {p}pfv, {p}lane0;",
        f"@{p}lane0 atom.relaxed.gpu.global.add.u32 {p}pf, [{p}d0+{HDR_NEXT_CHUNK}], 1;",
    ] if prefetch else [f"mov.pred {p}pfv, 0;"]
    return [
        "// smprof2: the warp's recording state (python/smprof/triton)",
        f".reg .pred {p}on, {p}lane0, {p}st, {p}q, {p}pfv;",
        f".reg .b32 {p}w, {p}mask, {p}clk, {p}k0, {p}t0, {p}t1, {p}t2, {p}t3, {p}t4, {p}t5, {p}hclk, {p}htag, {p}pf;",
        f".reg .b64 {p}cur, {p}d0, {p}d1, {p}d2;",
        f"ld.const.u64 {p}d0, [{ARENA_SYMBOL}+{REF_ARENA}];",
        f"ld.const.u32 {p}t0, [{ARENA_SYMBOL}+{REF_WARP_MASK}];",
        f"ld.const.u32 {p}t1, [{ARENA_SYMBOL}+{REF_CHUNK_SHIFT}];",
        f"mov.u32 {p}w, %tid.x;",  # the only read of %tid (see below)
        f"shr.u32 {p}w, {p}w, 5;",
        f"min.u32 {p}t2, {p}w, 31;",
        f"shr.b32 {p}t0, {p}t0, {p}t2;",
        f"and.b32 {p}t0, {p}t0, 1;",
        f"redux.sync.max.u32 {p}t0, {p}t0, -1;",  # the same in every lane: now ptxas knows
        f"setp.ne.u64 {p}on, {p}d0, 0;",
        f"setp.ne.and.u32 {p}on, {p}t0, 0, {p}on;",
        f"mov.u32 {p}t3, %laneid;",
        f"setp.eq.and.u32 {p}lane0, {p}t3, 0, {p}on;",
        f"mov.pred {p}st, {p}lane0;",
        f"shl.b32 {p}mask, 1, {p}t1;",
        f"sub.u32 {p}mask, {p}mask, 1;",
        f"mov.b64 {p}cur, {CURSOR_NEEDS_CHUNK:#x};",
        f"mov.u32 {p}pf, 0;",  # the prologue's claim (lane 0), and whether it is still to be taken (pfv)
        *claim,
        "// smprof2: end of prologue",
    ]


def _check() -> list[str]:
    """Sends the run's first marker to its cold path unless the warp's
    chunk has room for the whole run and one slot more (SMPROF2_ROOM bytes,
    filled in by the rewriter): the cursor's offset in its chunk is 0 (no
    chunk yet, or a state) or too close to the end. The run's other markers
    test nothing (the rewriter removes their check)."""
    p = PREFIX
    lid = f"{p}L" + "SMPROF2_ID"
    return [
        CHECK_BEGIN,
        f"cvt.u32.u64 {p}k0, {p}cur;",
        f"add.u32 {p}k0, {p}k0, -1;",
        f"and.b32 {p}k0, {p}k0, {p}mask;",
        f"add.u32 {p}k0, {p}k0, SMPROF2_ROOM;",
        f"setp.gt.u32 {p}q, {p}k0, {p}mask;",
        f"@{p}q bra.uni {lid}_cold;",
        CHECK_END,
    ]


def _state(hi: int) -> list[str]:
    """The cursor in a state (`hi`: no chunk, or the arena full) with a low
    word of 0, so that the next run's check sends it to the cold path again
    (the rest of this run does not move the cursor); stores are off."""
    p = PREFIX
    return [f"mov.b64 {p}cur, {hi << 32:#x};", f"setp.ne.and.u32 {p}st, {p}t0, {p}t0, {p}st;"]


def _cold_path(store: list[str]) -> list[str]:
    """Claims a chunk and stores the event there, or counts the run's
    events (SMPROF2_EVENTS) lost. The store is repeated here rather than
    jumped back to, so the hot path is one block that falls through to the
    marker's end."""
    p = PREFIX
    a = ARENA_SYMBOL
    lid = f"{p}L" + "SMPROF2_ID"
    return [
        COLD_BEGIN,
        f"{lid}_cold:",
        f"mov.b64 {{{p}t2, {p}t3}}, {p}cur;",
        f"setp.eq.u32 {p}q, {p}t3, {CURSOR_ARENA_FULL >> 32:#x};",
        f"@{p}q bra.uni {lid}_drop;",
        f"ld.const.u64 {p}d0, [{a}+{REF_CHUNKS}];",
        f"ld.const.u32 {p}t0, [{a}+{REF_NUM_CHUNKS}];",
        f"setp.eq.u64 {p}q, {p}d0, 0;",
        f"setp.eq.or.u32 {p}q, {p}t0, 0, {p}q;",
        f"@{p}q bra.uni {lid}_unplaced;",
        f"ld.const.u64 {p}d1, [{a}+{REF_ARENA}];",
        f"mov.u32 {p}t1, 0;",
        f"@{p}pfv mov.u32 {p}t1, {p}pf;",  # the prologue's claim, if it made one
        f"and.pred {p}q, {p}lane0, !{p}pfv;",
        f"@{p}q atom.relaxed.gpu.global.add.u32 {p}t1, [{p}d1+{HDR_NEXT_CHUNK}], 1;",
        f"mov.pred {p}pfv, 0;",
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
        f"@{p}lane0 st.global.v2.u64 [{p}d0], {{{p}d1, {p}d2}};",
        f"mov.u32 {p}t0, %ctaid.x;",
        f"mov.u32 {p}t1, %ctaid.y;",
        f"mov.u32 {p}t2, %ctaid.z;",
        f"shl.b32 {p}t2, {p}t2, 16;",
        f"or.b32 {p}t1, {p}t1, {p}t2;",
        f"mov.b64 {p}d1, {{{p}t0, {p}t1}};",
        f"mov.u32 {p}t0, %smid;",
        f"and.b32 {p}t0, {p}t0, 65535;",
        f"mov.u32 {p}t1, {p}w;",
        f"shl.b32 {p}t1, {p}t1, 16;",
        f"or.b32 {p}t0, {p}t0, {p}t1;",
        f"or.b32 {p}t0, {p}t0, {CHUNK_MAGIC << 24:#x};",
        f"mov.u32 {p}t1, %warpid;",
        f"and.b32 {p}t1, {p}t1, 255;",
        f"or.b32 {p}t1, {p}t1, {(CHUNK_FROM_TRITON | CHUNK_COMPACT) << 8:#x};",
        CLUSTER_SHAPE,
        f"mov.b64 {p}d2, {{{p}t0, {p}t1}};",
        f"@{p}lane0 st.global.v2.u64 [{p}d0+16], {{{p}d1, {p}d2}};",
        f"mov.u64 {p}d1, %clock64;",
        f"mov.u64 {p}d2, %globaltimer;",
        f"@{p}lane0 st.global.v2.u64 [{p}d0+32], {{{p}d1, {p}d2}};",
        f"add.u64 {p}cur, {p}d0, {CHUNK_HEADER_BYTES};",
        f"mov.pred {p}st, {p}lane0;",  # stores on again (off while the arena was unplaced)
        *store,
        f"bra.uni {lid}_done;",
        f"{lid}_full:",
        f"{lid}_drop:",
        f"ld.const.u64 {p}d1, [{a}+{REF_ARENA}];",
        f"@{p}lane0 red.relaxed.gpu.global.add.u64 [{p}d1+{HDR_DROPPED}], SMPROF2_EVENTS;",
        *_state(CURSOR_ARENA_FULL >> 32),
        f"bra.uni {lid}_done;",
        f"{lid}_unplaced:",
        f"ld.const.u64 {p}d1, [{a}+{REF_ARENA}];",
        f"@{p}lane0 red.relaxed.gpu.global.add.u64 [{p}d1+{HDR_UNPLACED}], SMPROF2_EVENTS;",
        *_state(CURSOR_NEEDS_CHUNK >> 32),
        f"bra.uni {lid}_done;",
        COLD_END,
    ]


def cluster_shape() -> list[str]:
    """What the rewriter puts in place of CLUSTER_SHAPE for targets with
    clusters (sm_90 on): the header's `cluster` (wire::ChunkHeader), the
    cluster's shape, %cluster_nctaid less one per axis, 4 bits each, in the
    upper half of t1. A Triton program with num_ctas > 1 is a cluster
    (tl.program_id is %clusterid): the collector names the program and the
    CTA from it. Without a cluster launch the shape reads 1x1x1, 0."""
    p = PREFIX
    lines = []
    for axis, shift in (("x", 16), ("y", 20), ("z", 24)):
        lines += [f"mov.u32 {p}t2, %cluster_nctaid.{axis};", f"sub.u32 {p}t2, {p}t2, 1;",
                  f"shl.b32 {p}t2, {p}t2, {shift};", f"or.b32 {p}t1, {p}t1, {p}t2;"]
    return lines


def _value_words(value: Value) -> tuple[list[str], str, str]:
    """Instructions that put the value's low and high words in registers
    (t2/t3, t4/t5), and the registers (or operand) that hold them."""
    p = PREFIX
    if value.operand is None:
        c = value.constant & 0xFFFFFFFFFFFFFFFF
        return [f"mov.b32 {p}t4, {c & 0xFFFFFFFF};", f"mov.b32 {p}t5, {c >> 32};"], f"{p}t4", f"{p}t5"
    if value.wide:
        return [f"mov.b64 {{{p}t2, {p}t3}}, {value.operand};"], f"{p}t2", f"{p}t3"
    return [f"mov.b32 {p}t5, 0;"], value.operand, f"{p}t5"


def slots(value: Value | None) -> int:
    """8-byte slots a marker fills: its event, and its value if it has one."""
    return 1 if value is None else 2


def _store(kind_flags: int, name: str, value: Value | None, late: bool) -> list[str]:
    """Stamps (a BEGIN: here, after the marker's own work) and stores the
    event (and its value) at its place in the run (lane 0). The run's first
    marker advances the cursor's low word past the whole run (the lines
    between ADVANCE_BEGIN/END, which the rewriter removes from the others);
    every marker then stores at a fixed distance back from it
    (SMPROF2_BACK bytes), so the address register is written once per run
    and no store waits for it. A 32-bit add is enough: a chunk is aligned to
    its size (at most 64 KiB) and its last slot is never filled (the check's
    room counts one slot more), so the cursor never reaches the chunk's end
    and the low word never carries."""
    p = PREFIX
    lines = [f"mov.u32 {p}clk, %clock;"] if late else []
    follows = VALUE_FOLLOWS if value is not None else 0
    lines += [
        f"mov.b32 {p}t1, {tag_token(name, kind_flags | follows)};",
        ADVANCE_BEGIN,
        f"mov.b64 {{{p}t2, {p}t3}}, {p}cur;",
        f"add.u32 {p}t2, {p}t2, SMPROF2_RUN_BYTES;",
        ALIGN_RUN,
        f"mov.b64 {p}cur, {{{p}t2, {p}t3}};",
        ADVANCE_END,
        EVENT_STORE,
    ]
    if value is not None:
        pre, vlo, vhi = _value_words(value)
        lines += pre + [f"{VALUE_STORE} {{{vlo}, {vhi}}};"]
    return lines


# How the rewriter joins stores (python/smprof/triton/_ptx_rewrite.py): a
# store instruction costs far more than the ALU work around it
# (docs/triton-design.md section 9), so two events, or an event and its
# value, that share a 16-byte-aligned unit of a run go out in one 128-bit
# store. The unit's first event is held in two registers until its second
# marker stores both.
EVENT_STORE = f"@{PREFIX}st st.global.v2.u32 [{PREFIX}cur+-SMPROF2_BACK], {{{PREFIX}clk, {PREFIX}t1}};"
VALUE_STORE = f"@{PREFIX}st st.global.v2.u32 [{PREFIX}cur+-SMPROF2_VALUE_BACK],"

# A run with joined stores starts 16-byte aligned: its first marker adds 15
# more than the run's bytes (rounded up to 16) and clears the low 4 bits.
# The rewriter drops this line from other runs (8-byte events need no more).
ALIGN_RUN = f"and.b32 {PREFIX}t2, {PREFIX}t2, -16;"


def hold() -> list[str]:
    """Replaces EVENT_STORE in a marker whose event the next marker stores."""
    p = PREFIX
    return [f"mov.b32 {p}hclk, {p}clk;", f"mov.b32 {p}htag, {p}t1;"]


def store_pair() -> str:
    """Replaces EVENT_STORE in a marker that stores the held event and its
    own (SMPROF2_PAIR_BACK: the held event's distance back)."""
    p = PREFIX
    return f"@{p}st st.global.v4.u32 [{p}cur+-SMPROF2_PAIR_BACK], {{{p}hclk, {p}htag, {p}clk, {p}t1}};"


def store_with_value(value_line: str) -> str:
    """The event and its value in one store, from the marker's VALUE_STORE
    line (which it replaces; EVENT_STORE goes)."""
    p = PREFIX
    operands = value_line.strip()[len(VALUE_STORE):].strip().rstrip(";").strip()[1:-1]
    return f"@{p}st st.global.v4.u32 [{p}cur+-SMPROF2_BACK], {{{p}clk, {p}t1, {operands}}};"


def marker(kind: int, flags: int, name: str, value: Value | None = None, guard: Guard | None = None) -> str:
    """The asm text of one marker: `kind` | `flags` (wire.h), name, value
    (None: the marker carries none), guard (None: every warp SMPROF_WARPS
    selects records it).

    Operand $0 is a dummy 32-bit output (Triton's inline asm has a result);
    a runtime value is $1, a guard's runtime condition the operand after.
    """
    if not 1 <= kind < KIND_VALUE_HIGH:
        raise ValueError(f"marker kind {kind} is not an event kind")
    p = PREFIX
    lid = f"{p}L" + "SMPROF2_ID"
    kind_flags = kind | flags | (FLAG_WIDE_VALUE if value is not None and value.wide else 0)
    late = kind == KIND_BEGIN  # a BEGIN is stamped after the marker's own work
    # `on` derives from constant memory and a warp reduction (redux.sync),
    # which ptxas can tell is the same in every lane: its branch needs no
    # convergence barrier.
    lines = [MARKER_BEGIN, name_comment(name), f"{SLOTS_COMMENT} {slots(value)}", *_guard(guard, lid)]
    if not late:
        lines.append(f"mov.u32 {p}clk, %clock;")
    store = _store(kind_flags, name, value, late)
    lines += _check() + store
    lines += [f"{lid}_done:", "mov.u32 $0, 0;"]
    lines += _cold_path(store)
    lines.append(MARKER_END)
    return "\n".join(lines)
