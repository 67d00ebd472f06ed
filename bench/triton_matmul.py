#!/usr/bin/env python3
"""smprof's Triton markers against Proton's intra-kernel mode, side by side.

One kernel: a 4096^3 fp16 matmul (128x128x64 tiles, 8 warps, 3 stages),
with a range "load" around the two tl.loads and a range "mma" around the
tl.dot of every K iteration (4 markers per iteration per warp: 2.1 M events
per launch). The same source serves every row through a constexpr MODE:
0 no markers, 1 smprof markers (sp.begin/end), 2 Proton scopes
(pl.enter_scope/exit_scope).

Each profiler runs in its own process (both would subscribe to CUPTI), and
each process times its variant interleaved with MODE 0, so every ratio
compares launches of one process on one GPU:

  plain      python: MODE 0 / prof=None (compiled out) / markers, no profiler
  smprof     under smprof-run (every warp records; the trace is written;
             SMPROF_BUFFER_MB=2048 and SMPROF_SHM_MB=1024 hold a batch); after
             the first harvest the injector grows this kernel's chunks while
             that cuts its claims (a warp's 256 events take 2 KiB)
  smprof-1k  the same with SMPROF_CHUNK_BYTES=1024, the former fixed size
             (3 claims per warp: a claim's atomic round trip stalls the warp)
  smprof-w1  the same as smprof with SMPROF_WARPS=0,4 (one warp per warpgroup)
  proton     proton.start(backend="instrumentation"), trace data (its
             default mode: a 4% shared-memory ring per warp that keeps the
             last events of each warp; it warns that the rest are dropped:
             here 128 of every warp's 256 per launch)
  proton-global  the same with mode.Default(buffer_type="global"): a 16 KiB
             global-memory buffer per warp, which keeps every event here
             (no warning), as smprof does

Kernel time: 10 launches back to back between two CUDA events, behind
cuBLAS matmuls (so the GPU never waits for the host), with Proton's launch hooks
(its per-launch synchronisation and copy) taken out; median over --iters
batches, interleaved with MODE 0 in the same process (in Proton's process
too: MODE 0 is timed again after proton.start, with the hooks out). Every
batch starts after --gap-ms of idle GPU. Without the gap, on an H200, the
unmarked kernel took 0.22 to 0.257 ms depending on the process, and Proton's
ratio came out anywhere from 0.947 to 1.118; with 100 ms it took
0.2192-0.2217 ms in every process, NVML read 1980 MHz after every batch (the
MHz column) and the ratios held within 0.2 points. The likely cause: a
process that keeps the GPU busy runs it at its power limit, at a lower
clock, where an instrumented kernel (less power per second) gains clock
back; smprof's processes pause at every harvest. Wall per launch:
--burst launches back to back with everything each profiler does per
launch (Proton synchronises and copies after every launch; smprof only
harvests at the synchronisation after the burst).

Usage: bench/triton_matmul.py [--iters N] [--burst N] [--gap-ms MS] [--rounds N] [--smprof-run PATH]
(smprof-run is found like smprof.tool_path does: SMPROF_HOME,
SMPROF_BUILD_DIR, PATH). Needs torch and triton (Proton ships in triton).
Proton's wall batch takes --burst times 0.7-1.9 s (it synchronises and
copies after every launch); --burst 5 keeps a full run to a few minutes
(docs/performance.md's session-17 figures used --iters 20 --burst 5).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "python"))


def child(variant: str, iters: int, burst: int, dump: str | None, gap_ms: float) -> None:
    import time

    import torch
    import triton
    import triton.language as tl
    import triton.profiler as proton
    import triton.profiler.language as pl
    from triton import knobs

    import smprof.triton as sp

    @triton.jit
    def matmul(a_ptr, b_ptr, c_ptr, M, N, K, prof, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
               GROUP: tl.constexpr, MODE: tl.constexpr):
        pid = tl.program_id(0)
        grid_m = tl.cdiv(M, BM)
        grid_n = tl.cdiv(N, BN)
        width = GROUP * grid_n
        group = pid // width
        first_m = group * GROUP
        size_m = min(grid_m - first_m, GROUP)
        pid_m = first_m + (pid % size_m)
        pid_n = (pid % width) // size_m
        offs_m = pid_m * BM + tl.arange(0, BM)
        offs_n = pid_n * BN + tl.arange(0, BN)
        offs_k = tl.arange(0, BK)
        a_ptrs = a_ptr + offs_m[:, None] * K + offs_k[None, :]
        b_ptrs = b_ptr + offs_k[:, None] * N + offs_n[None, :]
        acc = tl.zeros((BM, BN), dtype=tl.float32)
        for _ in range(0, tl.cdiv(K, BK)):
            if MODE == 1:
                sp.begin(prof, "load")
            if MODE == 2:
                pl.enter_scope("load")
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
            if MODE == 1:
                sp.end(prof, "load")
                sp.begin(prof, "mma")
            if MODE == 2:
                pl.exit_scope("load")
                pl.enter_scope("mma")
            acc = tl.dot(a, b, acc)
            if MODE == 1:
                sp.end(prof, "mma")
            if MODE == 2:
                pl.exit_scope("mma")
            a_ptrs += BK
            b_ptrs += BK * N
        c_ptrs = c_ptr + offs_m[:, None] * N + offs_n[None, :]
        tl.store(c_ptrs, acc.to(tl.float16))

    n = 4096
    torch.manual_seed(0)
    a = torch.randn((n, n), device="cuda", dtype=torch.float16)
    b = torch.randn((n, n), device="cuda", dtype=torch.float16)
    c = torch.empty((n, n), device="cuda", dtype=torch.float16)
    filler = torch.empty_like(c)
    grid = (triton.cdiv(n, 128) * triton.cdiv(n, 128), )
    cfg = dict(BM=128, BN=128, BK=64, GROUP=8, num_warps=8, num_stages=3)

    def launch(mode, prof):
        return matmul[grid](a, b, c, n, n, n, prof, MODE=mode, **cfg)

    try:
        import pynvml
        pynvml.nvmlInit()
        nvml = pynvml.nvmlDeviceGetHandleByIndex(torch.cuda.current_device())
    except Exception:  # no NVML: the clock column stays empty
        nvml = None
    last_clock = [None]

    def batch(mode, prof, count):
        """ms per launch of `count` launches back to back on the GPU, after
        --gap-ms of idle GPU (see the module comment); the SM clock at the
        batch's end goes to last_clock[0]."""
        time.sleep(gap_ms / 1000)
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        for _ in range(4):  # the GPU stays busy while the launches are queued
            torch.mm(a, b, out=filler)
        start.record()
        for _ in range(count):
            launch(mode, prof)
        end.record()
        end.synchronize()
        if nvml is not None:
            last_clock[0] = pynvml.nvmlDeviceGetClockInfo(nvml, pynvml.NVML_CLOCK_SM)
        torch.cuda.synchronize()
        return start.elapsed_time(end) / count

    ref = torch.matmul(a, b)

    @contextlib.contextmanager
    def launch_hooks_out():
        """Proton's launch hooks (its per-launch buffer, copy and
        synchronisation) out of Triton's launcher inside the block, back
        after it."""
        hooks = (knobs.runtime.launch_enter_hook, knobs.runtime.launch_exit_hook)
        saved = [list(h.calls) for h in hooks]
        for h in hooks:
            h.calls[:] = []
        try:
            yield
        finally:
            for h, calls in zip(hooks, saved):
                h.calls[:] = calls

    def measure(rows, timed_also=None):
        """{label: figures} for rows {label: (MODE, prof)}, interleaved.
        Rows in `timed_also` join only the kernel-time batches (their
        kernel_ms comes back; correctness and wall time are not taken)."""
        correct = {}
        regs = {}
        for label, (mode, prof) in rows.items():
            c.zero_()
            kernel = launch(mode, prof)
            regs[label] = kernel.n_regs
            if dump:
                base = os.path.join(dump, f"{variant}-{label}".replace(" ", "_").replace(",", ""))
                with open(base + ".ptx", "w") as f:
                    f.write(kernel.asm["ptx"])
                with open(base + ".sass", "w") as f:
                    f.write(kernel.asm["sass"])
            torch.cuda.synchronize()
            correct[label] = bool(torch.allclose(c.float(), ref.float(), atol=0.5, rtol=0.05))
            for _ in range(3):
                launch(mode, prof)
        torch.cuda.synchronize()
        # Wall time per launch, with everything the profiler does per launch.
        wall = {label: batch(mode, prof, burst) for label, (mode, prof) in rows.items()}
        # Kernel time: launches back to back with Proton's launch hooks (its
        # per-launch buffer, copy and synchronisation) taken out, so that
        # only the instrumented kernel is timed; smprof adds nothing per
        # launch here (its buffer holds the batch, harvested at the
        # synchronisation after it).
        timed = {**rows, **(timed_also or {})}
        times = {label: [] for label in timed}
        clocks = {label: [] for label in timed}
        with launch_hooks_out():
            for _ in range(iters):
                for label, (mode, prof) in timed.items():
                    times[label].append(batch(mode, prof, 10))
                    clocks[label].append(last_clock[0])
        figures = {label: {"kernel_ms": statistics.median(times[label]), "min_ms": min(times[label]),
                           "sm_mhz": int(statistics.median(clocks[label])) if nvml is not None else None}
                   for label in timed}
        for label in rows:
            figures[label].update(wall_ms=wall[label], correct=correct[label], regs=regs[label])
        return figures

    none = {"none": (0, None)}
    if variant == "plain":
        figures = measure({**none, "compiled out": (1, None), "markers, no profiler": (1, sp.buffer())})
    elif variant.startswith("smprof"):
        figures = measure({**none, variant: (1, sp.buffer())})
    elif variant.startswith("proton"):
        # MODE 0's correctness and wall time are taken before Proton starts:
        # a kernel without scopes launched with Proton's launch hooks in
        # place dies in libproton's exit hook with SIGFPE (Triton 3.6). Its
        # kernel time is taken again after the start, interleaved with
        # Proton's (the hooks are out during those batches), so that the
        # ratio compares launches at the same point of the process; the
        # first figure stays as the row "none, before start". (Without
        # --gap-ms the two differed by 5-13% on an H200, the GPU's clock at
        # either point, and Proton's ratio against the first moved with it;
        # with the gap they agree within 0.1%.)
        figures = measure(none)
        before = launch(0, None)
        pl.enable_semantic("triton")
        mode_kwargs = {"buffer_type": "global"} if variant == "proton-global" else {}
        mode_kwargs.update(json.loads(os.environ.get("SMPROF_BENCH_PROTON_MODE", "{}")))
        proton.start("/tmp/smprof-bench-proton", data="trace", backend="instrumentation",
                     mode=proton.mode.Default(**mode_kwargs))
        after = measure({variant: (2, None)}, timed_also=none)
        with launch_hooks_out():
            again = launch(0, None)
        if again.asm["ptx"] != before.asm["ptx"]:
            raise SystemExit("MODE 0 was compiled again after Proton's start: its interleaved time is not "
                             "the unmarked kernel's")
        figures["none, before start"] = figures["none"]
        figures["none"] = {**figures["none"], **after.pop("none")}
        figures.update(after)
    else:
        raise SystemExit(f"unknown variant {variant!r}")
    print(json.dumps({"device": torch.cuda.get_device_name(), "rows": figures}), flush=True)
    if variant.startswith("proton"):
        # Proton's session is not finalized: writing the trace of every
        # launch (tens of millions of events) takes minutes and measures
        # nothing here. (smprof's process exits normally: its last harvest
        # runs at exit.)
        os._exit(0)


def run_child(variant: str, args, smprof_run: str | None) -> dict | None:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", variant, "--iters", str(args.iters), "--burst",
           str(args.burst), "--gap-ms", str(args.gap_ms)] + (["--dump", os.path.abspath(args.dump)] if args.dump else [])
    env = dict(os.environ)
    if variant.startswith("smprof"):
        if smprof_run is None:
            print(f"{variant}: skipped (smprof-run not found)", file=sys.stderr)
            return None
        trace = os.path.join(tempfile.mkdtemp(prefix="smprof-bench-"), "matmul.pftrace")
        cmd = [smprof_run, "--quiet", "-o", trace, "--"] + cmd
        # Room for a batch of launches (2.1 M events, 17 MB each) between
        # harvests, in the device buffer and in the shared-memory ring.
        env.setdefault("SMPROF_BUFFER_MB", "2048")
        env.setdefault("SMPROF_SHM_MB", "1024")
        if "-w1" in variant:
            env["SMPROF_WARPS"] = "0,4"
        if variant.endswith("-1k"):  # chunks of 1 KiB at most: every warp claims 5 per launch
            env["SMPROF_CHUNK_BYTES"] = "1024"
    # Every process compiles its kernels afresh: nothing from another
    # variant or an earlier smprof version can come out of Triton's cache.
    env["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="smprof-bench-triton-")
    try:
        out = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    finally:
        shutil.rmtree(env["TRITON_CACHE_DIR"], ignore_errors=True)
    lines = [line for line in out.stdout.splitlines() if line.startswith("{")]
    errors = out.stderr.splitlines()
    dropped = [line for line in errors if "events are dropped" in line]
    if dropped:  # Proton's ring: one line per warp whose first events were overwritten
        print(f"{variant}: {len(dropped)} warp-launches reported events dropped, e.g. {dropped[0].strip()}")
    elif variant.startswith("proton") and out.returncode == 0:
        print(f"{variant}: no warp reported dropped events")
    others = [line for line in errors if "events are dropped" not in line]
    if out.returncode != 0 or not lines:
        print("\n".join(others[-20:]), file=sys.stderr)
    if out.returncode != 0:
        print(f"{variant}: exit status {out.returncode} after its figures" if lines else "", file=sys.stderr)
    if not lines:
        print(f"{variant}: failed (exit status {out.returncode})", file=sys.stderr)
        return None
    return json.loads(lines[-1])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child")
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--burst", type=int, default=50)
    parser.add_argument("--gap-ms", type=float, default=100,
                        help="idle time before every timed batch, so that every process measures at the clock "
                             "of a GPU that is not at its power limit (see the module comment)")
    parser.add_argument("--smprof-run")
    parser.add_argument("--variants", default="smprof,smprof-1k,smprof-w1,proton,proton-global,plain")
    parser.add_argument("--dump", help="write each row's PTX and SASS into this directory")
    parser.add_argument("--rounds", type=int, default=1,
                        help="run the variants' processes this many times, in turn, and end with each row's "
                             "median ratio over the rounds (the profilers' rows move by several points from "
                             "one process to the next)")
    args = parser.parse_args()
    if args.child:
        child(args.child, args.iters, args.burst, args.dump, args.gap_ms)
        return 0
    smprof_run = args.smprof_run
    if smprof_run is None:
        from smprof import ToolNotFound, tool_path
        try:
            smprof_run = tool_path("smprof-run")
        except ToolNotFound as e:
            print(e, file=sys.stderr)
    print("triton_matmul: 4096^3 fp16, 128x128x64 tiles, 8 warps, 3 stages; ranges load+mma per K iteration "
          f"(2,097,152 events per launch); median of {args.iters}, burst {args.burst}")
    print(f"{'process':<13} {'row':<22} {'kernel ms':>10} {'vs none':>8} {'wall ms':>9} {'vs none':>8} {'regs':>5} {'MHz':>5}  correct")
    failed = False
    ratios: dict[tuple[str, str], list[float]] = {}
    for _ in range(args.rounds):
        for variant in args.variants.split(","):
            result = run_child(variant, args, smprof_run)
            if result is None:
                failed = True
                continue
            rows = result["rows"]
            base = rows["none"]
            for label, r in rows.items():
                ratio = r["kernel_ms"] / base["kernel_ms"]
                print(f"{variant:<13} {label:<22} {r['kernel_ms']:>10.4f} {ratio:>8.3f} "
                      f"{r['wall_ms']:>9.4f} {r['wall_ms'] / base['wall_ms']:>8.3f} {r['regs']:>5} {r.get('sm_mhz') or '':>5}  {r['correct']}")
                failed |= not r["correct"]
                if label != "none":
                    ratios.setdefault((variant, label), []).append(ratio)
            print(f"{'':<13} device: {result['device']}")
    if args.rounds > 1:
        print(f"kernel time x unmarked over {args.rounds} rounds: median (min-max)")
        for (variant, label), values in ratios.items():
            print(f"{variant:<13} {label:<22} {statistics.median(values):>8.3f} ({min(values):.3f}-{max(values):.3f})")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
