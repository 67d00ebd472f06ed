"""CPU tests of smprof.profile(): the block under `smprof-run --serve`, end to end.

A process gets one profiling session, so every test that starts one runs it in
a child Python (`_child`) and reads back what it printed. On a machine without
an NVIDIA driver (libcuda.so.1) the block runs unprofiled with a
ProfileWarning and the trace holds the run's metadata; with
SMPROF_TEST_CUDA_STUB (the CUDA toolkit's stub libcuda.so, set by ctest where
it exists) the injector itself is loaded and started, and CUPTI refuses it.

Run by ctest (python.unit), which sets SMPROF_BUILD_DIR; outside it the tests
that need smprof-run skip, saying so.
"""

import importlib
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from unittest import mock

# The module, even once smprof/__init__.py binds smprof.profile to the class
# (then `import smprof.profile as P` would give the class).
P = importlib.import_module("smprof.profile")

_HEADER = """
import importlib, json, os, sys, warnings
P = importlib.import_module("smprof.profile")
warnings.simplefilter("always")
def env_of(*names):
    return {n: os.environ.get(n) for n in names}
def report(**values):
    print("RESULT " + json.dumps(values), flush=True)
"""

_VARIABLES = ("SMPROF_RUN_ID", "SMPROF_INJECTOR", "SMPROF_KERNELS", "SMPROF_WARPS")


def _smprof_run_built():
    build = os.environ.get("SMPROF_BUILD_DIR")
    return bool(build) and os.path.isfile(os.path.join(build, "bin", "smprof-run"))


def _driver_present():
    probe = "import ctypes; ctypes.CDLL('libcuda.so.1')"
    return subprocess.run([sys.executable, "-c", probe], capture_output=True).returncode == 0


class Child:
    """What a child Python printed: its exit status, stderr and its RESULT line."""

    def __init__(self, done: subprocess.CompletedProcess):
        self.code = done.returncode
        self.out = done.stdout
        self.err = done.stderr
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        self.result = json.loads(lines[-1][len("RESULT "):]) if lines else None

    def __repr__(self):
        return f"exit {self.code}\nstdout:\n{self.out}\nstderr:\n{self.err}"


def _child(code: str, cwd: str, env=None) -> Child:
    child_env = {k: v for k, v in os.environ.items() if not k.startswith("SMPROF_") or k == "SMPROF_BUILD_DIR"}
    child_env.update(env or {})
    done = subprocess.run(
        [sys.executable, "-c", _HEADER + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=child_env,
        timeout=180,
    )
    return Child(done)


@unittest.skipUnless(_smprof_run_built(), "SMPROF_BUILD_DIR/bin/smprof-run not found: run through ctest (python.unit)")
class ProfileEndToEnd(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.driver = _driver_present()

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.out = os.path.join(self.dir.name, "t.pftrace")

    def test_block_writes_the_trace_and_statistics_and_restores_the_environment(self):
        c = _child(
            f"""
            before = env_of(*{_VARIABLES!r})
            with warnings.catch_warnings(record=True) as caught:
                with P.profile({self.out!r}, kernels=["matmul*", "gemm"], warps=[0, 1]) as run:
                    inside = env_of(*{_VARIABLES!r})
            stats = run.stats()
            report(before=before, inside=inside, after=env_of(*{_VARIABLES!r}), output=run.output,
                   stats_json=run.stats_json, stats_csv=run.stats_csv, launches=run.launches,
                   profiled=run.profiled, finished=run.finished, stats_launches=stats.launches,
                   kernels=len(stats.kernels), warnings=[str(w.message) for w in caught
                                                         if issubclass(w.category, P.ProfileWarning)])
            """,
            self.dir.name,
            env={"SMPROF_KERNELS": "old*"},
        )
        self.assertEqual(c.code, 0, c)
        r = c.result
        self.assertEqual(r["output"], self.out)
        self.assertTrue(os.path.isfile(self.out), c)
        self.assertEqual(r["stats_json"], self.out + ".stats.json")
        self.assertTrue(os.path.isfile(r["stats_json"]))
        self.assertTrue(os.path.isfile(r["stats_csv"]))
        self.assertTrue(r["finished"])
        self.assertEqual((r["launches"], r["stats_launches"], r["kernels"]), (0, 0, 0))
        # Inside: the run's variables; the options beat the environment.
        self.assertTrue(r["inside"]["SMPROF_RUN_ID"])
        self.assertTrue(r["inside"]["SMPROF_INJECTOR"].endswith("libsmprof_inject.so"), r["inside"])
        self.assertEqual(r["inside"]["SMPROF_KERNELS"], "matmul*,gemm")
        self.assertEqual(r["inside"]["SMPROF_WARPS"], "0,1")
        # After: as before, unset variables unset again.
        self.assertEqual(r["after"], r["before"])
        self.assertEqual(r["after"]["SMPROF_KERNELS"], "old*")
        self.assertIsNone(r["after"]["SMPROF_RUN_ID"])
        self.assertIn("smprof: trace: " + self.out, c.err)
        if not self.driver:
            self.assertFalse(r["profiled"])
            self.assertEqual(len(r["warnings"]), 1, c)
            self.assertIn("libcuda.so.1 cannot be loaded", r["warnings"][0])
            self.assertIn("no NVIDIA driver", c.err)  # smprof-run's hint, in its summary

    def test_body_that_raises_still_ends_the_run(self):
        c = _child(
            f"""
            try:
                with P.profile({self.out!r}, quiet=True):
                    raise ValueError("from the body")
            except ValueError as e:
                report(error=str(e), after=env_of("SMPROF_RUN_ID", "SMPROF_INJECTOR"))
            """,
            self.dir.name,
        )
        self.assertEqual(c.code, 0, c)
        self.assertEqual(c.result["error"], "from the body")
        self.assertEqual(c.result["after"], {"SMPROF_RUN_ID": None, "SMPROF_INJECTOR": None})
        self.assertTrue(os.path.isfile(self.out), c)
        self.assertNotIn("smprof: trace:", c.err)  # quiet

    def test_existing_output_needs_force(self):
        with open(self.out, "w") as f:
            f.write("precious")
        c = _child(
            f"""
            try:
                with P.profile({self.out!r}):
                    report(ran=True)
            except P.ProfileError as e:
                report(error=str(e), after=env_of("SMPROF_RUN_ID"))
            """,
            self.dir.name,
        )
        self.assertEqual(c.code, 0, c)
        self.assertIn("exited with status 2 before it was ready", c.result["error"])
        self.assertIn("force=True", c.result["error"])
        self.assertIn(self.out + " already exists", c.err)
        self.assertIsNone(c.result["after"]["SMPROF_RUN_ID"])
        with open(self.out) as f:
            self.assertEqual(f.read(), "precious")

        c = _child(f"with P.profile({self.out!r}, force=True) as run: pass\nreport(output=run.output)", self.dir.name)
        self.assertEqual(c.code, 0, c)
        with open(self.out, "rb") as f:
            self.assertNotEqual(f.read(), b"precious")

    def test_one_session_per_process(self):
        other = os.path.join(self.dir.name, "second.pftrace")
        c = _child(
            f"""
            with P.profile({self.out!r}, quiet=True):
                try:
                    with P.profile({other!r}):
                        pass
                except P.ProfileError as e:
                    nested = str(e)
            try:
                with P.profile({other!r}):
                    pass
            except P.ProfileError as e:
                second = str(e)
            report(nested=nested, second=second)
            """,
            self.dir.name,
        )
        self.assertEqual(c.code, 0, c)
        self.assertIn("already active in this process", c.result["nested"])
        self.assertIn("already had its profiling session", c.result["second"])
        self.assertIn("one session per process", c.result["second"])
        self.assertTrue(os.path.isfile(self.out))
        self.assertFalse(os.path.exists(other))

    def test_a_forked_child_holding_the_pipe_does_not_hold_up_the_end(self):
        c = _child(
            f"""
            import time
            with P.profile({self.out!r}, quiet=True):
                if os.fork() == 0:  # keeps every descriptor, smprof-run's stdin among them
                    os.close(1), os.close(2)
                    time.sleep(8)
                    os._exit(0)
                start = time.monotonic()
            report(seconds=time.monotonic() - start)
            """,
            self.dir.name,
        )
        self.assertEqual(c.code, 0, c)
        self.assertLess(c.result["seconds"], 6, "the end waited for the forked child")
        self.assertTrue(os.path.isfile(self.out))

    def test_a_forked_child_leaving_the_block_does_not_end_the_session(self):
        c = _child(
            f"""
            import time
            with P.profile({self.out!r}, quiet=True) as run:
                pid = os.fork()
                if pid != 0:
                    child = os.WEXITSTATUS(os.waitpid(pid, 0)[1])
                    time.sleep(0.5)  # smprof-run would be gone by now had the child said stop
                    still_serving = run._proc.poll() is None
            if pid == 0:
                os._exit(0 if os.environ.get("SMPROF_RUN_ID") is None else 9)
            report(still_serving=still_serving, finished=run.finished, child=child)
            """,
            self.dir.name,
        )
        self.assertEqual(c.code, 0, c)
        self.assertTrue(c.result["still_serving"])
        self.assertTrue(c.result["finished"])
        self.assertEqual(c.result["child"], 0, "the child's environment was not restored")

    def test_a_caller_that_dies_in_the_block_still_gets_its_trace(self):
        trace = os.path.join(self.dir.name, "dead.json")
        c = _child(f"P.profile({trace!r}, quiet=True).__enter__()\nos._exit(7)", self.dir.name)
        self.assertEqual(c.code, 7, c)
        deadline = time.monotonic() + 60
        while not os.path.isfile(trace) and time.monotonic() < deadline:
            time.sleep(0.05)
        with open(trace) as f:
            events = json.load(f)
        self.assertEqual(events[-1]["args"]["exit"], {"status": "caller_gone"})


@unittest.skipUnless(os.environ.get("SMPROF_TEST_CUDA_STUB"), "SMPROF_TEST_CUDA_STUB not set: run through ctest")
@unittest.skipUnless(_smprof_run_built(), "SMPROF_BUILD_DIR/bin/smprof-run not found: run through ctest (python.unit)")
class ProfileWithTheStubDriver(unittest.TestCase):
    """The injector is loaded with ctypes and started; CUPTI refuses the stub driver, so nothing is profiled."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.lib = os.path.join(self.dir.name, "lib")
        os.mkdir(self.lib)
        os.symlink(os.environ["SMPROF_TEST_CUDA_STUB"], os.path.join(self.lib, "libcuda.so.1"))
        self.env = {"LD_LIBRARY_PATH": self.lib}
        self.out = os.path.join(self.dir.name, "s.pftrace")

    def test_injector_starts_in_process_and_stops(self):
        c = _child(
            f"""
            with warnings.catch_warnings(record=True) as caught:
                with P.profile({self.out!r}) as run:
                    pass
            report(profiled=run.profiled, warnings=len(caught), after=env_of("SMPROF_RUN_ID"), output=run.output)
            """,
            self.dir.name,
            self.env,
        )
        self.assertEqual(c.code, 0, c)
        self.assertFalse(c.result["profiled"])  # smprof_inject_stop: it never got CUPTI
        self.assertEqual(c.result["warnings"], 0, c)
        self.assertIsNone(c.result["after"]["SMPROF_RUN_ID"])
        # The injector attached to the run: the process is in it.
        self.assertIn("smprof: profiled 0 launches, 0 events from 1 process(es)", c.err)
        self.assertTrue(os.path.isfile(self.out))

    def test_an_injector_loaded_before_is_refused(self):
        c = _child(
            f"""
            import ctypes
            ctypes.CDLL(os.path.join(os.environ["SMPROF_BUILD_DIR"], "lib", "libsmprof_inject.so"))
            try:
                with P.profile({self.out!r}):
                    pass
            except P.ProfileError as e:
                report(error=str(e), after=env_of("SMPROF_RUN_ID"))
            """,
            self.dir.name,
            self.env,
        )
        self.assertEqual(c.code, 0, c)
        self.assertIn("is already loaded in this process", c.result["error"])
        self.assertIsNone(c.result["after"]["SMPROF_RUN_ID"])
        self.assertFalse(os.path.exists(self.out))  # nothing ran: the run's files are removed


class ProfileRefusesToStart(unittest.TestCase):
    """Errors before any session starts: safe in this process."""

    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)
        self.out = os.path.join(self.dir.name, "t.pftrace")

    def fake_smprof_run(self, script: str) -> dict:
        """An environment whose smprof-run is `script` (sh)."""
        bin_dir = os.path.join(self.dir.name, "build", "bin")
        os.makedirs(bin_dir)
        path = os.path.join(bin_dir, "smprof-run")
        with open(path, "w") as f:
            f.write("#!/bin/sh\n" + script + "\n")
        os.chmod(path, 0o755)
        return {"SMPROF_BUILD_DIR": os.path.dirname(bin_dir), "SMPROF_HOME": ""}

    def test_under_smprof_run(self):
        with mock.patch.dict(os.environ, {"SMPROF_RUN_ID": "123-abcdef01"}):
            with self.assertRaises(P.ProfileError) as e:
                with P.profile(self.out):
                    self.fail("the body must not run")
        self.assertIn("runs under smprof-run (SMPROF_RUN_ID is set)", str(e.exception))
        self.assertFalse(os.path.exists(self.out))
        self.assertIsNone(P._active)

    def test_smprof_run_that_dies_before_ready(self):
        with mock.patch.dict(os.environ, self.fake_smprof_run("exit 3")):
            with self.assertRaises(P.ProfileError) as e:
                with P.profile(self.out):
                    self.fail("the body must not run")
        self.assertIn("smprof-run --serve exited with status 3 before it was ready", str(e.exception))
        self.assertNotIn("SMPROF_RUN_ID", os.environ)
        self.assertIsNone(P._active)
        self.assertIsNone(P._ended)  # no session was used: a later one may start

    def test_smprof_run_that_writes_something_else(self):
        with mock.patch.dict(os.environ, self.fake_smprof_run("echo 'hello'\nexit 0")):
            with self.assertRaises(P.ProfileError) as e:
                with P.profile(self.out):
                    pass
        self.assertIn("where the ready line was expected", str(e.exception))
        self.assertIn("do not match", str(e.exception))

    def test_smprof_run_that_never_gets_ready(self):
        with mock.patch.dict(os.environ, self.fake_smprof_run("exec sleep 30")), mock.patch.object(
            P, "READY_TIMEOUT_S", 0.3
        ):
            with self.assertRaises(P.ProfileError) as e:
                with P.profile(self.out):
                    pass
        self.assertIn("was not ready within", str(e.exception))

    def test_bad_arguments(self):
        with self.assertRaises(TypeError):
            P.profile(self.out, extra_args="--buffer-mb 256")
        with self.assertRaises(TypeError):
            P.profile(self.out, kernels=3.5)
        handle = P.profile(self.out, kernels="a*", launches=["a*:0-2", "b*:5"], warps=7)
        self.assertIn("--launches", handle._args)
        self.assertEqual(handle._args[handle._args.index("--launches") + 1], "a*:0-2,b*:5")
        self.assertEqual(handle._args[handle._args.index("--warps") + 1], "7")
        with self.assertRaises(P.ProfileError) as e:
            handle.stats()
        self.assertIn("after", str(e.exception))


if __name__ == "__main__":
    unittest.main()
