"""What the Triton markers store, on the CPU: a rewritten kernel's lane 0
runs through ptx_lane's model against a modelled arena, and the arena's
chunks are read back the way the harvest reads them (wire::kChunkCompact).

Checked: the events and values of a loop, in order; a chunk's last slot
stays empty and the cursor's 32-bit add survives a chunk that ends at a
4 GiB boundary; a full arena and a half-published one count every lost
event exactly, with runs of several markers; a warp the mask leaves out
stores nothing; a recording warp's first chunk is claimed in the prologue
and used by its first event (or left zero when it records nothing). The GPU tests (tests/gpu) check the same on the device.
"""

import re
import struct
import unittest

from smprof.triton import _marker_ptx as mp
from smprof.triton import _ptx_rewrite as rw

from tests.ptx_lane import Arena, Lane, PtxError

CHUNK_SHIFT = 8  # the smallest chunk: runs must fit it
CHUNK = 1 << CHUNK_SHIFT
NAME_BASE = 0x9000_0000


def _asm(text, out, value=None):
    text = text.replace("$0", out)
    if value is not None:
        text = text.replace("$1", value)
    return "\t// begin inline asm\n" + text + "\n\t// end inline asm"


def _marker_asm(m, out):
    """A marker (kind, flags, name, Value or None, operand[, Guard, condition
    operand]) as LLVM prints it."""
    text = _asm(mp.marker(*m[:4], *m[5:6]), out, m[4])
    return text.replace("$2" if m[4] else "$1", m[6]) if len(m) > 6 else text


def kernel(body):
    """A kernel `kern(u32 param 0)` around `body` (PTX lines after the
    parameter's load into %r1)."""
    return f""".version 8.7
.target sm_90a
.address_size 64

.visible .entry kern(
	.param .u32 kern_param_0
)
{{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<40>;
	.reg .b64 	%rd<4>;
	ld.param.u32 	%r1, [kern_param_0];
{body}
	ret;
}}
"""


def loop_kernel(before, body):
    """A kernel: the markers `before`, then a loop of param-0 iterations over
    `body` (markers as (kind, flags, name, Value or None, operand[, Guard,
    condition operand]); %r2 is the iteration, %r3 its lowest bit, %rd2 the
    iteration as 64 bits + 2^40)."""
    pre = "\n".join(_marker_asm(m, f"%r{10 + i}") for i, m in enumerate(before))
    loop = "\n".join(_marker_asm(m, f"%r{20 + i}") for i, m in enumerate(body))
    return kernel(f"""	mov.u32 	%r2, 0;
{pre}
$L__BB0_1:
	cvt.u64.u32 	%rd2, %r2;
	add.u64 	%rd2, %rd2, 1099511627776;
	and.b32 	%r3, %r2, 1;
{loop}
	add.s32 	%r2, %r2, 1;
	setp.lt.s32 	%p1, %r2, %r1;
	@%p1 bra 	$L__BB0_1;""")


class Device:
    """A rewritten module's arena, its g_arena constant and one warp's run."""

    def __init__(self, ptx, chunks, warp_mask=0xFFFFFFFF, cluster=(1, 1, 1)):
        self.ptx = rw.rewrite(ptx)
        self.cluster = cluster
        m = re.search(re.escape(mp.NAME_BASE_SYMBOL) + r"\[\d+\] = \{([^}]*)\}", self.ptx)
        self.names = bytes(int(b) for b in m.group(1).split(","))
        # The chunks end at a 4 GiB boundary: the last one's cursor must not carry.
        self.chunks = (5 << 32) - chunks * CHUNK
        self.base = self.chunks - CHUNK  # the ArenaHeader, then chunk 0
        self.num_chunks = chunks
        self.arena = Arena(self.base, (chunks + 1) * CHUNK)
        self.ref = bytearray(64)
        struct.pack_into("<QQIII", self.ref, 0, self.base, self.chunks, chunks, CHUNK_SHIFT, warp_mask)

    def publish(self, chunks):
        struct.pack_into("<I", self.ref, 16, chunks)

    def run(self, iterations, warp=0, watch=None):
        self.warp = warp
        lane = Lane(self.ptx, "kern", self.arena, {mp.ARENA_SYMBOL: self.ref}, {mp.NAME_BASE_SYMBOL: NAME_BASE},
                    {"kern_param_0": iterations}, warp=warp, block=(5, 1, 0), watch=watch, cluster=self.cluster)
        lane.run()
        return lane

    def counter(self, offset, size=8):
        return self.arena.read(self.base + offset, size)

    def events(self):
        """(kind_flags, name, value or None) in order, and the chunks used."""
        out = []
        used = self.counter(mp.HDR_NEXT_CHUNK, 4)
        last_clock = None
        for c in range(min(used, self.num_chunks)):
            at = self.chunks + c * CHUNK
            grid, name_base, bx, by, bz, sm, warp, magic, hw_warp, flags, cluster = struct.unpack_from(
                "<QQIHHHBBBBH", self.arena.bytes, at - self.base)
            assert magic == mp.CHUNK_MAGIC, f"chunk {c}: no header"
            assert (grid, name_base, bx, by, sm) == (7, NAME_BASE, 5, 1, 3), f"chunk {c}: header"
            assert warp == self.warp, f"chunk {c}: warp {warp}, not {self.warp}"
            assert flags == mp.CHUNK_FROM_TRITON | mp.CHUNK_COMPACT
            shape = 0
            if ".target sm_9" in self.ptx:  # wire::ChunkHeader::cluster: %cluster_nctaid - 1, 4 bits per axis
                shape = sum((n - 1) << (4 * axis) for axis, n in enumerate(self.cluster))
            assert cluster == shape, f"chunk {c}: cluster shape {cluster:#x}, not {shape:#x}"
            slot = mp.CHUNK_HEADER_BYTES
            while slot < CHUNK:
                clock, tag = struct.unpack_from("<II", self.arena.bytes, at - self.base + slot)
                slot += 8
                if tag == 0:
                    assert clock == 0, f"chunk {c}: a clock in an unused slot"
                    continue
                assert slot < CHUNK, f"chunk {c}: its last slot was filled"
                assert last_clock is None or clock > last_clock, "clocks out of order"
                last_clock = clock
                value = None
                if tag & mp.VALUE_FOLLOWS:
                    value = struct.unpack_from("<Q", self.arena.bytes, at - self.base + slot)[0]
                    slot += 8
                offset = (tag & ~mp.VALUE_FOLLOWS) >> mp.NAME_SHIFT
                name = self.names[offset:self.names.index(b"\0", offset)].decode()
                out.append((tag & 0xFF, name, value))
        return out, used


BEGIN = (mp.KIND_BEGIN, 0, "load", None, None)
END = (mp.KIND_END, 0, "load", None, None)
VALUE = (mp.KIND_INSTANT, mp.FLAG_HAS_VALUE, "i", mp.Value(operand="$1"), "%r2")
WIDE = (mp.KIND_INSTANT, mp.FLAG_HAS_VALUE, "w", mp.Value(operand="$1", wide=True), "%rd2")
START = (mp.KIND_INSTANT, 0, "start", None, None)


TICK = (mp.KIND_INSTANT, 0, "tick", None, None)


def expected_joined(iterations):
    out = [(mp.KIND_INSTANT, "start", None)]
    for i in range(iterations):
        out += [(mp.KIND_BEGIN, "load", None), (mp.KIND_END, "load", None),
                (mp.KIND_INSTANT | mp.FLAG_HAS_VALUE, "i", i),
                (mp.KIND_INSTANT | mp.FLAG_HAS_VALUE | mp.FLAG_WIDE_VALUE, "w", i + (1 << 40)),
                (mp.KIND_INSTANT, "tick", None)]
    return out


def expected(iterations):
    out = [(mp.KIND_INSTANT, "start", None)]
    for i in range(iterations):
        out += [(mp.KIND_BEGIN, "load", None), (mp.KIND_INSTANT | mp.FLAG_HAS_VALUE, "i", i),
                (mp.KIND_INSTANT | mp.FLAG_HAS_VALUE | mp.FLAG_WIDE_VALUE, "w", i + (1 << 40)),
                (mp.KIND_END, "load", None)]
    return out


class MarkerLane(unittest.TestCase):
    ITERATIONS = 40  # 161 events, 281 slots: runs of 6 slots, 4 runs a 256-byte chunk

    def device(self, chunks, **kw):
        return Device(loop_kernel([START], [BEGIN, VALUE, WIDE, END]), chunks, **kw)

    def test_a_loop_records_every_event_and_value_in_order(self):
        d = self.device(chunks=16)
        d.run(self.ITERATIONS)
        events, used = d.events()
        self.assertEqual(events, expected(self.ITERATIONS))
        # Chunk 0: the first run and four of the loop's (6 slots each, and
        # room for one slot more: 48 + 8 + 4 * 48 + 8 = 256); then four a chunk.
        self.assertEqual(used, 1 + -(-(self.ITERATIONS - 4) // 4))
        self.assertEqual(d.counter(mp.HDR_DROPPED), 0)
        self.assertEqual(d.counter(mp.HDR_UNPLACED), 0)

    def test_every_chunk_header_carries_the_cluster_shape(self):
        # num_ctas > 1: the program is a cluster; the header's shape lets the
        # collector name the program (%clusterid) and the CTA (events()
        # checks every chunk's shape against the launch's).
        for cluster in ((2, 1, 1), (4, 2, 3)):
            d = self.device(chunks=16, cluster=cluster)
            d.run(self.ITERATIONS)
            events, used = d.events()
            self.assertEqual(events, expected(self.ITERATIONS))
            self.assertGreater(used, 1)

    def test_targets_without_clusters_write_shape_zero(self):
        ptx = loop_kernel([START], [BEGIN, VALUE, WIDE, END]).replace(".target sm_90a", ".target sm_80")
        d = Device(ptx, chunks=16, cluster=(2, 1, 1))  # %cluster_nctaid is not read: shape 0
        self.assertNotIn("%cluster_nctaid", d.ptx)
        d.run(self.ITERATIONS)
        self.assertEqual(d.events()[0], expected(self.ITERATIONS))

    def test_a_full_arena_counts_every_event_it_loses(self):
        d = self.device(chunks=3)  # the last one ends at 4 GiB
        d.run(self.ITERATIONS)
        events, used = d.events()
        self.assertEqual(used, 4)  # 3 placed, then the claim that found the arena full
        self.assertEqual(events, expected(self.ITERATIONS)[:len(events)])
        self.assertEqual(len(events) + d.counter(mp.HDR_DROPPED), len(expected(self.ITERATIONS)))
        self.assertEqual(len(events), 1 + 12 * 4)  # whole runs only: 4 a chunk

    def test_a_chunks_last_slot_stays_empty_and_the_cursor_never_carries(self):
        # Runs of one slot would fill a chunk to its end; the last chunk ends
        # at a 4 GiB boundary, where a cursor at the end would carry.
        d = Device(loop_kernel([START], [TICK]), chunks=3)
        d.run(100)
        events, used = d.events()  # asserts that no chunk's last slot holds an event
        per_chunk = (CHUNK - mp.CHUNK_HEADER_BYTES) // mp.EVENT_BYTES - 1
        self.assertEqual(len(events), 3 * per_chunk)
        self.assertEqual(events[1:], [(mp.KIND_INSTANT, "tick", None)] * (3 * per_chunk - 1))
        self.assertEqual(len(events) + d.counter(mp.HDR_DROPPED), 101)

    def test_a_half_published_arena_counts_what_it_misses_and_then_records(self):
        d = self.device(chunks=16)
        d.publish(0)
        steps = []

        def publish_later(lane):
            if lane.steps == 400:
                d.publish(16)
                steps.append(lane.steps)

        d.run(self.ITERATIONS, watch=publish_later)
        self.assertEqual(steps, [400])
        events, _ = d.events()
        unplaced = d.counter(mp.HDR_UNPLACED)
        self.assertGreater(unplaced, 0)
        self.assertGreater(len(events), 0)
        self.assertEqual(events, expected(self.ITERATIONS)[int(unplaced):])
        self.assertEqual(d.counter(mp.HDR_DROPPED), 0)

    def test_a_warp_the_mask_leaves_out_stores_nothing(self):
        d = self.device(chunks=16, warp_mask=0b01)
        d.run(self.ITERATIONS, warp=1)
        self.assertEqual(d.counter(mp.HDR_NEXT_CHUNK, 4), 0)
        self.assertEqual(bytes(d.arena.bytes), bytes(len(d.arena.bytes)))
        d.run(self.ITERATIONS, warp=0)
        self.assertEqual(d.events()[0], expected(self.ITERATIONS))

    def test_joined_stores_land_aligned_and_in_order(self):
        # BEGIN and END share a 16-byte store (the first held in registers),
        # each valued event stores with its value; the loop's run starts one
        # slot late after START's 8 bytes, to be 16-byte aligned.
        d = self.joined_device(chunks=16)
        self.assertIn(mp.ALIGN_RUN, d.ptx)
        self.assertEqual(d.ptx.count("st.global.v4.u32 [smprof2_cur+-"), 3)  # END's (a pair), VALUE's, WIDE's
        d.run(self.ITERATIONS)
        events, used = d.events()
        self.assertEqual(events, expected_joined(self.ITERATIONS))
        # 7 slots a run, in 64 bytes; with the skipped slot and the chunk's
        # last one a run needs 80 bytes: 2 runs in chunk 0, 3 in the others.
        self.assertEqual(used, 1 + -(-(self.ITERATIONS - 2) // 3))
        self.assertEqual(d.counter(mp.HDR_DROPPED), 0)

    def test_joined_stores_count_every_event_a_full_arena_loses(self):
        d = self.joined_device(chunks=3)
        d.run(self.ITERATIONS)
        events, used = d.events()
        self.assertEqual(used, 4)
        self.assertEqual(len(events), 1 + (2 + 3 + 3) * 5)  # whole runs only
        self.assertEqual(events, expected_joined(self.ITERATIONS)[:len(events)])
        self.assertEqual(len(events) + d.counter(mp.HDR_DROPPED), len(expected_joined(self.ITERATIONS)))

    def test_the_model_refuses_a_joined_store_out_of_alignment(self):
        d = self.joined_device(chunks=16)
        d.ptx = d.ptx.replace(mp.ALIGN_RUN, "")
        with self.assertRaisesRegex(PtxError, "not aligned to 16 bytes"):
            d.run(self.ITERATIONS)

    def joined_device(self, chunks):
        return Device(loop_kernel([START], [BEGIN, END, VALUE, WIDE, TICK]), chunks)

    def test_the_model_refuses_a_store_outside_the_arena(self):
        d = self.device(chunks=16)
        d.ptx = d.ptx.replace("@smprof2_st st.global", "st.global")
        d.publish(0)  # no chunk: the cursor stays in its state, and now a store goes through it
        with self.assertRaisesRegex(PtxError, "outside the arena"):
            d.run(self.ITERATIONS)


def branch_kernel(marker):
    """A kernel that runs `marker` only when param 0 is not 0."""
    return kernel(f"""	setp.eq.s32 	%p1, %r1, 0;
	@%p1 bra 	$L__BB0_2;
{_marker_asm(marker, "%r10")}
$L__BB0_2:""")


def maybe_loop_kernel(marker):
    """A loop of param-0 iterations over `marker`, in LLVM's shape for a loop
    that may run zero times: a forward branch around a loop that tests at
    its end."""
    return kernel(f"""	setp.eq.s32 	%p1, %r1, 0;
	@%p1 bra 	$L__BB0_2;
$L__BB0_1:                              // =>This Inner Loop Header: Depth=1
{_marker_asm(marker, "%r10")}
	sub.s32 	%r1, %r1, 1;
	setp.ne.s32 	%p2, %r1, 0;
	@%p2 bra 	$L__BB0_1;
$L__BB0_2:""")


class FirstClaim(unittest.TestCase):
    """A recording warp claims its first chunk in the kernel's prologue (the
    atomic's round trip overlaps the kernel's start); its first cold path
    takes that claim instead of making one. Only where its warps are likely
    to record: a marker with no "who records" options in a loop, or one no
    branch jumps over."""

    def test_the_first_chunk_is_claimed_before_any_marker_runs(self):
        d = Device(maybe_loop_kernel(TICK), chunks=4)
        d.run(0)  # the marker is not reached
        self.assertEqual(d.counter(mp.HDR_NEXT_CHUNK, 4), 1)
        # Its chunk stays zero (the harvest counts it empty), nothing is lost.
        self.assertEqual(bytes(d.arena.bytes[CHUNK:]), bytes(len(d.arena.bytes) - CHUNK))
        self.assertEqual((d.counter(mp.HDR_DROPPED), d.counter(mp.HDR_UNPLACED)), (0, 0))
        d = Device(maybe_loop_kernel(TICK), chunks=4)
        d.run(3)
        self.assertEqual(d.events(), ([(mp.KIND_INSTANT, "tick", None)] * 3, 1))  # the same chunk, not a second

    def test_a_marker_only_behind_a_forward_branch_claims_at_its_first_event(self):
        # `if pid == 0:` around the kernel's only marker: most warps would
        # take a chunk for nothing.
        d = Device(branch_kernel(TICK), chunks=4)
        d.run(0)
        self.assertEqual(d.counter(mp.HDR_NEXT_CHUNK, 4), 0)
        d.run(1)
        self.assertEqual(d.events(), ([(mp.KIND_INSTANT, "tick", None)], 1))
        # A marker after the branch's target is reached by every warp.
        after = kernel(f"""	setp.eq.s32 	%p1, %r1, 0;
	@%p1 bra 	$L__BB0_2;
	add.s32 	%r1, %r1, 1;
$L__BB0_2:
{_marker_asm(TICK, "%r10")}""")
        early = "atom.relaxed.gpu.global.add.u32 smprof2_pf,"
        self.assertIn(early, rw.rewrite(after))
        self.assertNotIn(early, rw.rewrite(branch_kernel(TICK)))

    def test_a_first_claim_that_finds_the_arena_full_counts_its_events_lost(self):
        d = Device(maybe_loop_kernel(TICK), chunks=4)
        struct.pack_into("<I", d.arena.bytes, mp.HDR_NEXT_CHUNK, 4)  # other warps took every chunk
        d.run(1)
        self.assertEqual(d.counter(mp.HDR_NEXT_CHUNK, 4), 5)
        self.assertEqual(d.counter(mp.HDR_DROPPED), 1)
        self.assertEqual(bytes(d.arena.bytes[CHUNK:]), bytes(len(d.arena.bytes) - CHUNK))

    def test_a_claim_made_before_the_arena_is_placed_is_used_once_it_is(self):
        d = Device(loop_kernel([START], [BEGIN, END]), chunks=8)
        d.publish(0)
        claimed = []

        def publish_later(lane):
            if lane.steps == 200:
                claimed.append(d.counter(mp.HDR_NEXT_CHUNK, 4))
                d.publish(8)

        d.run(40, watch=publish_later)
        self.assertEqual(claimed, [1])  # the prologue's claim, while the arena was not placed
        unplaced = d.counter(mp.HDR_UNPLACED)
        self.assertGreater(unplaced, 0)
        events, used = d.events()  # asserts that chunk 0, that claim, holds a header
        want = [(mp.KIND_INSTANT, "start", None)] + [(mp.KIND_BEGIN, "load", None), (mp.KIND_END, "load", None)] * 40
        self.assertEqual(events, want[unplaced:])
        self.assertGreater(used, 1)

    def test_a_kernel_whose_markers_all_choose_their_warps_claims_at_its_first_event(self):
        # Here most warps may record nothing: no chunk is taken for them.
        d = Device(maybe_loop_kernel(TICK[:5] + (mp.Guard(1, 1),)), chunks=4)
        d.run(1, warp=0)
        self.assertEqual(d.counter(mp.HDR_NEXT_CHUNK, 4), 0)
        d.run(1, warp=1)
        self.assertEqual(d.events(), ([(mp.KIND_INSTANT, "tick", None)], 1))


class GuardedMarkers(unittest.TestCase):
    """Markers with their own "who records" options (on_warps=, when=): a
    warp that skips one stores nothing for it and its neighbours' runs stay
    exact."""

    ITERATIONS = 40

    def kernel(self):
        warp1 = (mp.KIND_INSTANT, mp.FLAG_HAS_VALUE, "i", mp.Value(operand="$1"), "%r2", mp.Guard(1, 1))
        odd = (mp.KIND_INSTANT, 0, "odd", None, None, mp.Guard(when="$1"), "%r3")
        return loop_kernel([START], [BEGIN, warp1, odd, END])

    def expected(self, warp, iterations):
        out = [(mp.KIND_INSTANT, "start", None)]
        for i in range(iterations):
            out.append((mp.KIND_BEGIN, "load", None))
            if warp == 1:
                out.append((mp.KIND_INSTANT | mp.FLAG_HAS_VALUE, "i", i))
            if i % 2:
                out.append((mp.KIND_INSTANT, "odd", None))
            out.append((mp.KIND_END, "load", None))
        return out

    def test_a_guarded_marker_is_a_run_of_its_own_with_its_test_before_its_check(self):
        out = rw.rewrite(self.kernel())
        # START; BEGIN; the warp-1 instant; the odd instant; END: five runs, five checks.
        self.assertEqual(len(re.findall(r"bra.uni smprof2_L\d+_cold;", out)), 5)
        first = out[out.index("// smprof2-marker-begin 2"):]
        first = first[:first.index("// smprof2-marker-end")]
        self.assertIn("sub.u32 smprof2_t2, smprof2_w, 1;\nsetp.lt.and.u32 smprof2_q, smprof2_t2, 1, smprof2_on;",
                      first)
        self.assertLess(first.index("@!smprof2_q bra.uni smprof2_L2_done;"), first.index("bra.uni smprof2_L2_cold;"))
        odd = out[out.index("// smprof2-marker-begin 3"):]
        self.assertIn("mov.pred smprof2_q, smprof2_on;\nsetp.ne.and.u32 smprof2_q, %r3, 0, smprof2_q;", odd)

    def test_each_warp_records_what_its_options_select_in_order(self):
        for warp in (0, 1):
            d = Device(self.kernel(), chunks=32)
            d.run(self.ITERATIONS, warp=warp)
            events, _ = d.events()
            self.assertEqual(events, self.expected(warp, self.ITERATIONS), f"warp {warp}")
            self.assertEqual(d.counter(mp.HDR_DROPPED), 0)

    def test_a_full_arena_counts_exactly_what_a_warp_would_have_recorded(self):
        for warp in (0, 1):
            d = Device(self.kernel(), chunks=3)
            d.run(self.ITERATIONS, warp=warp)
            events, used = d.events()
            self.assertEqual(used, 4)
            want = self.expected(warp, self.ITERATIONS)
            self.assertEqual(events, want[:len(events)], f"warp {warp}")
            self.assertEqual(len(events) + d.counter(mp.HDR_DROPPED), len(want), f"warp {warp}")

    def test_smprof_warps_applies_on_top(self):
        d = Device(self.kernel(), chunks=32, warp_mask=0b01)  # warp 1 left out: its warp-1 marker too
        d.run(self.ITERATIONS, warp=1)
        self.assertEqual(d.counter(mp.HDR_NEXT_CHUNK, 4), 0)
        self.assertEqual(bytes(d.arena.bytes), bytes(len(d.arena.bytes)))


if __name__ == "__main__":
    unittest.main()
