#!/usr/bin/env python3
"""What profiling costs the application, at default settings, side by side.

Each workload runs plainly and under `smprof-run` (no options but the trace's
path), alternating, for --rounds rounds, in one call; the table gives each
measure plain, profiled and their ratio (medians over the rounds):

  triton-dense    a 4096^3 fp16 Triton matmul (128x128x64 tiles, 8 warps, 3
                  stages) with a "load" and a "dot" range per K step (2.1 M
                  events a launch): batches of 20 launches back to back, each
                  timed with CUDA events (ms per launch, median of --batches
                  batches after two warm ones)
  triton-program  the same kernel with one range per program around its K loop
                  (8 k events a launch)
  triton-both     both kernels in one process, batches of each in turn
  gemm-4096       smprof_example_gemm 4096 10: every event of 10 launches of the
                  example SGEMM (336 M events)
  gemm-2048       smprof_example_gemm 2048 20 (84 M events)
  matmul-sample   smprof_bench_matmul_sample: a cuda-samples-style 32x32-tiled
                  matrix multiply, 301 launches, three markers per K tile in
                  every warp (58 M events)

For the programs, "app s" is the program's wall time (under smprof-run: until
the program ended, which is what it waits for), "total s" the whole command's
(under smprof-run: until the trace is finished), "events" what the trace
holds and "lost" what smprof-run counted lost. Every profiled run must lose
nothing (the bench fails otherwise).

Usage: bench/app_wall.py [--rounds N] [--only w1,w2] [--batches N] [--build DIR]
Needs the build (smprof-run, the example, the sample) and, for the Triton
workloads, torch and triton.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "python"))

BATCH = 20  # launches back to back in a timed batch


def triton_child(kinds: list[str], batches: int) -> None:
    """Times batches of each kind of launch; prints one JSON line."""
    import torch
    import triton
    import triton.language as tl

    import smprof.triton as sp

    @triton.jit
    def matmul(a_ptr, b_ptr, c_ptr, M, N, K, prof, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr,
               GROUP: tl.constexpr, DENSE: tl.constexpr):
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
        if not DENSE:
            sp.begin(prof, "mainloop")
        for _ in range(0, tl.cdiv(K, BK)):
            if DENSE:
                sp.begin(prof, "load")
            a = tl.load(a_ptrs)
            b = tl.load(b_ptrs)
            if DENSE:
                sp.end(prof, "load")
                sp.begin(prof, "dot")
            acc = tl.dot(a, b, acc)
            if DENSE:
                sp.end(prof, "dot")
            a_ptrs += BK
            b_ptrs += BK * N
        if not DENSE:
            sp.end(prof, "mainloop")
        tl.store(c_ptr + offs_m[:, None] * N + offs_n[None, :], acc.to(tl.float16))

    start_wall = time.monotonic()
    n = 4096
    torch.manual_seed(0)
    a = torch.randn((n, n), device="cuda", dtype=torch.float16)
    b = torch.randn((n, n), device="cuda", dtype=torch.float16)
    c = torch.empty((n, n), device="cuda", dtype=torch.float16)
    grid = (triton.cdiv(n, 128) * triton.cdiv(n, 128), )
    prof = sp.buffer()
    ref = torch.matmul(a, b).float()

    def launch(kind):
        matmul[grid](a, b, c, n, n, n, prof, BM=128, BN=128, BK=64, GROUP=8, DENSE=kind == "dense", num_warps=8,
                     num_stages=3)

    correct = True
    for kind in kinds:
        c.zero_()
        launch(kind)
        torch.cuda.synchronize()
        correct &= bool(torch.allclose(c.float(), ref, atol=0.5, rtol=0.05))
    times = {kind: [] for kind in kinds}
    for i in range(batches + 2):
        for kind in kinds:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            for _ in range(BATCH):
                launch(kind)
            end.record()
            end.synchronize()  # the application's own synchronisation: smprof harvests here
            if i >= 2:
                times[kind].append(start.elapsed_time(end) / BATCH)
    torch.cuda.synchronize()
    print(json.dumps({"ms": {k: statistics.median(v) for k, v in times.items()}, "correct": correct,
                      "wall_s": time.monotonic() - start_wall, "device": torch.cuda.get_device_name()}),
          flush=True)


def smprof_summary(stderr: str) -> dict:
    """What smprof-run said: events, lost events, finishing time."""
    out = {"events": None, "lost": None, "finishing_s": 0.0}
    m = re.search(r"profiled \d+ launches, (\d+) events .*; lost (\d+) events", stderr)
    if m:
        out["events"], out["lost"] = int(m.group(1)), int(m.group(2))
    m = re.search(r"the trace was finished ([\d.]+) s after the program ended", stderr)
    if m:
        out["finishing_s"] = float(m.group(1))
    return out


def run(cmd: list[str], smprof_run: str | None, env: dict) -> dict:
    """One run, plain or (with smprof_run) profiled at default settings."""
    tmp = tempfile.mkdtemp(prefix="smprof-app-wall-")
    try:
        if smprof_run:
            cmd = [smprof_run, "-o", os.path.join(tmp, "trace.pftrace"), "--"] + cmd
        t0 = time.monotonic()
        p = subprocess.run(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        total = time.monotonic() - t0
        result = {"total_s": total, "rc": p.returncode, "stdout": p.stdout, "stderr": p.stderr}
        if smprof_run:
            result.update(smprof_summary(p.stderr))
        result["app_s"] = total - result.get("finishing_s", 0.0)
        lines = [line for line in p.stdout.splitlines() if line.startswith("{")]
        if lines:
            result["child"] = json.loads(lines[-1])
        return result
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def median(values):
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--triton-child")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--batches", type=int, default=10)
    parser.add_argument("--only", default="triton-dense,triton-program,triton-both,gemm-4096,gemm-2048,matmul-sample")
    parser.add_argument("--build", default=os.environ.get("SMPROF_BUILD_DIR", os.path.join(ROOT, "build")))
    args = parser.parse_args()
    if args.triton_child:
        triton_child(args.triton_child.split(","), args.batches)
        return 0
    bin_dir = os.path.join(args.build, "bin")
    smprof_run = os.path.join(bin_dir, "smprof-run")
    triton = [sys.executable, os.path.abspath(__file__), "--batches", str(args.batches), "--triton-child"]
    workloads = {
        "triton-dense": triton + ["dense"],
        "triton-program": triton + ["program"],
        "triton-both": triton + ["dense,program"],
        "gemm-4096": [os.path.join(bin_dir, "smprof_example_gemm"), "4096", "10"],
        "gemm-2048": [os.path.join(bin_dir, "smprof_example_gemm"), "2048", "20"],
        "matmul-sample": [os.path.join(bin_dir, "smprof_bench_matmul_sample")],
    }
    failed = False
    print(f"app_wall: plain vs smprof-run at default settings, median of {args.rounds} rounds")
    print(f"{'workload':<15} {'measure':<18} {'plain':>10} {'smprof':>10} {'x plain':>8}")
    for name in args.only.split(","):
        cmd = workloads[name]
        env = dict(os.environ)
        env["TRITON_CACHE_DIR"] = tempfile.mkdtemp(prefix="smprof-app-wall-triton-")
        plain, prof = [], []
        for _ in range(args.rounds):
            plain.append(run(cmd, None, env))
            prof.append(run(cmd, smprof_run, env))
        shutil.rmtree(env["TRITON_CACHE_DIR"], ignore_errors=True)
        for r in plain + prof:
            if r["rc"] != 0 or (r.get("child") is not None and not r["child"]["correct"]):
                failed = True
                print(f"{name}: failed (exit status {r['rc']})\n{r['stderr'][-2000:]}", file=sys.stderr)
        rows = []
        if name.startswith("triton") and all("child" in r for r in plain + prof):
            for kind in plain[0]["child"]["ms"]:
                rows.append((f"ms/launch {kind}", median([r["child"]["ms"][kind] for r in plain]),
                             median([r["child"]["ms"][kind] for r in prof])))
        rows.append(("app s", median([r["app_s"] for r in plain]), median([r["app_s"] for r in prof])))
        rows.append(("total s", median([r["total_s"] for r in plain]), median([r["total_s"] for r in prof])))
        for measure, p, s in rows:
            ratio = f"{s / p:8.3f}" if p and s else f"{'':>8}"
            print(f"{name:<15} {measure:<18} {p or 0:>10.4f} {s or 0:>10.4f} {ratio}")
        events, lost = median([r.get("events") for r in prof]), max((r.get("lost") or 0) for r in prof)
        finishing = median([r.get("finishing_s") for r in prof])
        print(f"{name:<15} {'events, lost':<18} {events or 0:>10.0f} {lost:>10}   finishing {finishing or 0:.1f} s")
        if lost != 0 or any(r.get("events") is None for r in prof):
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
