#!/usr/bin/env python3
"""Triton programs for the GPU tests (gpu_scenarios_test.cc, "Triton*").

Every kernel has a known event count per warp, so the tests check exact
numbers per launch. Usage: triton_app.py SCENARIO [ARG...]

  streams K      tkern launched K times on each of two streams
                 (grid 6, 4 warps; per warp: 3 "load" ranges with value=i,
                 1 "tile" instant with a 64-bit value, 1 "ctr" counter,
                 phases "step %d" x2 + phase_end)
  graph R        tkern captured once in a CUDA graph, replayed R times
  mixed          tkern (Triton) and driver_kernel (CUDA C++, from
                 smprof_driver_module.fatbin beside this script; 5 "drv"
                 instants per warp), 2 launches each, alternating
  off            tkern with prof=None: prints whether its PTX has smprof's
                 globals (it must not) and runs it
  profile PATH   tkern once before smprof.profile(PATH), twice inside it,
                 once after: the trace has the two launches inside
  options        okern (grid 3, 4 warps), markers with "who records"
                 options: per warp, "all" x1; "w0" (per_block) on warp 0;
                 "w23" (on_warps=(2, 2)) on warps 2 and 3; "odd" ranges on
                 warp 1 in iterations 1 and 3 of 4 (on_warp and when); a
                 "prog" counter sample per iteration in program 1 only
                 (when); "never" (on_warp=0 and on_warps=(1, 2)) nowhere
  clusters       tkern once with num_ctas=2: each of its 6 programs is a
                 cluster of 2 CTAs (tl.program_id is %clusterid), 12 CTAs

Prints "ok" at the end when the results are right.
"""

import ctypes
import os
import sys

import torch
import triton
import triton.language as tl

import smprof.triton as sp

GRID = 6
WARPS = 4


@triton.jit
def tkern(x_ptr, prof, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    for i in range(3):
        sp.begin(prof, "load")
        x = x + 1
        sp.end(prof, "load", value=i)
    sp.instant(prof, "tile", value=pid.to(tl.int64) * 4294967296 + 7)
    sp.counter(prof, "ctr", pid * 10)
    with sp.range(prof, "store"):
        tl.store(x_ptr + offs, x)
    sp.phase(prof, "step %d", arg=0)
    sp.phase(prof, "step %d", arg=1)
    sp.phase_end(prof)


@triton.jit
def okern(x_ptr, prof, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs)
    sp.instant(prof, "all")
    sp.instant(prof, "w0", per_block=True)
    sp.instant(prof, "w23", on_warps=(2, 2))
    for i in range(4):
        sp.begin(prof, "odd", on_warp=1, when=i % 2 == 1)
        x = x + 1
        sp.end(prof, "odd", on_warp=1, when=i % 2 == 1)
        sp.instant(prof, "never", on_warp=0, on_warps=(1, 2))
        sp.counter(prof, "prog", i, when=pid == 1)
    tl.store(x_ptr + offs, x)


_BUFFER = object()


def launch(x, prof=_BUFFER):
    return tkern[(GRID, )](x, sp.buffer() if prof is _BUFFER else prof, BLOCK=WARPS * 32, num_warps=WARPS)


def driver_kernel():
    """driver_kernel(int n) of the CUDA C++ test module, launchable from here."""
    cuda = ctypes.CDLL("libcuda.so.1")
    module = ctypes.c_void_p()
    fatbin = os.path.join(os.path.dirname(os.path.abspath(__file__)), "smprof_driver_module.fatbin")
    assert cuda.cuModuleLoad(ctypes.byref(module), fatbin.encode()) == 0, "cuModuleLoad " + fatbin
    fn = ctypes.c_void_p()
    assert cuda.cuModuleGetFunction(ctypes.byref(fn), module, b"driver_kernel") == 0

    def run(n, stream):
        arg = ctypes.c_int(n)
        params = (ctypes.c_void_p * 1)(ctypes.cast(ctypes.byref(arg), ctypes.c_void_p))
        rc = cuda.cuLaunchKernel(fn, 2, 1, 1, 64, 1, 1, 0, ctypes.c_void_p(stream), params, None)
        assert rc == 0, f"cuLaunchKernel: {rc}"

    return run


def main():
    scenario = sys.argv[1]
    n = GRID * WARPS * 32
    x = torch.zeros(n, device="cuda")
    if scenario == "streams":
        k = int(sys.argv[2])
        xs = [x, torch.zeros(n, device="cuda")]
        streams = [torch.cuda.Stream(), torch.cuda.Stream()]
        for _ in range(k):
            for s, buf in zip(streams, xs):
                with torch.cuda.stream(s):
                    launch(buf)
        torch.cuda.synchronize()
        ok = all(bool(torch.all(b == 3 * k)) for b in xs)
    elif scenario == "graph":
        replays = int(sys.argv[2])
        launch(x)  # compiles and loads outside the capture
        torch.cuda.synchronize()
        x.zero_()
        graph = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        with torch.cuda.stream(s):
            with torch.cuda.graph(graph, stream=s):
                launch(x)
        for _ in range(replays):
            graph.replay()
        torch.cuda.synchronize()
        ok = bool(torch.all(x == 3 * replays))
    elif scenario == "mixed":
        run_driver = driver_kernel()
        stream = torch.cuda.current_stream().cuda_stream
        for _ in range(2):
            launch(x)
            run_driver(5, stream)
        torch.cuda.synchronize()
        ok = bool(torch.all(x == 6))
    elif scenario == "off":
        compiled = launch(x, prof=None)
        torch.cuda.synchronize()
        ptx = compiled.asm["ptx"]
        print("smprof globals in PTX:", "g_arena" in ptx or "smprof2" in ptx)
        ok = bool(torch.all(x == 3)) and "smprof2" not in ptx
    elif scenario == "profile":
        import smprof
        launch(x)
        torch.cuda.synchronize()
        with smprof.profile(sys.argv[2], force=True):
            launch(x)
            launch(x)
        launch(x)
        torch.cuda.synchronize()
        ok = bool(torch.all(x == 12))
    elif scenario == "clusters":
        tkern[(GRID, )](x, sp.buffer(), BLOCK=WARPS * 32, num_warps=WARPS, num_ctas=2)
        torch.cuda.synchronize()
        ok = bool(torch.all(x == 3))
    elif scenario == "options":
        okern[(3, )](x, sp.buffer(), BLOCK=WARPS * 32, num_warps=WARPS)
        torch.cuda.synchronize()
        ok = bool(torch.all(x[:3 * WARPS * 32] == 4))
    else:
        raise SystemExit(f"unknown scenario {scenario!r}")
    print("ok" if ok else "WRONG RESULTS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
