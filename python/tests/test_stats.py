"""CPU tests of smprof.stats on a run written through the collector's real
sinks (tests/support/write_stats_run.cc: sink_runs.h's WriteDeviceApiRun,
whose records are listed in its comment) and of the tools' lookup.

Run by ctest (python.unit), which sets SMPROF_TEST_STATS_RUN and
SMPROF_BUILD_DIR; outside it the tests that need them skip, saying so.
"""

import json
import os
import subprocess
import sys
import tempfile
import unittest
from unittest import mock

import smprof


def _pandas_installed():
    try:
        import pandas  # noqa: F401
    except ImportError:
        return False
    return True


class StatsOfAWrittenRun(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        tool = os.environ.get("SMPROF_TEST_STATS_RUN")
        if not tool:
            raise unittest.SkipTest("SMPROF_TEST_STATS_RUN not set: run through ctest (python.unit)")
        cls.dir = tempfile.TemporaryDirectory()
        cls.trace = os.path.join(cls.dir.name, "run.pftrace")
        subprocess.run([tool, cls.trace], check=True)
        with open(cls.trace + ".stats.json") as f:
            cls.raw = json.load(f)

    @classmethod
    def tearDownClass(cls):
        cls.dir.cleanup()

    def test_reads_every_part_of_the_stats_file(self):
        run = smprof.stats(self.trace + ".stats.json")
        self.assertEqual(run.launches, self.raw["launches"])
        self.assertEqual(len(run.kernels), 1)
        gemm = run.kernel("gemm<128>")
        regions = {(r.name, r.phase): r for r in gemm.regions}
        # "load" is a phase on one warp and a range on another: two regions.
        self.assertIn(("load", True), regions)
        self.assertIn(("load", False), regions)
        self.assertEqual(regions[("mma", False)].count, 1)
        self.assertEqual(regions[("mma", False)].ns.total, 900)  # [1100, 2000]
        values = {(v.name, v.source): v for v in gemm.values}
        self.assertEqual(values[("inflight", "counter")].count, 4)
        self.assertEqual((values[("inflight", "counter")].min, values[("inflight", "counter")].max), (1, 5))
        self.assertEqual(values[("wait", "slice")].sum, 1 << 40)  # a 64-bit value, exact
        self.assertEqual(values[("tile", "instant")].min, -7)  # signed
        spans = {s.name: s for s in gemm.async_spans}
        self.assertEqual((spans["stage"].count, spans["stage"].unterminated, spans["stage"].unmatched_ends), (5, 1, 1))
        self.assertEqual(run.async_spans, self.raw["async_spans"])
        # The objects hold what the file holds, field by field.
        raw_gemm = self.raw["kernels"][0]
        for raw, region in zip(raw_gemm["regions"], gemm.regions):
            self.assertEqual(raw["name"], region.name)
            self.assertEqual(raw["ns"]["p95"], region.ns.p95)
            self.assertEqual(raw["cycles"]["total"], region.cycles.total)
            self.assertEqual(raw.get("share"), region.share)
            self.assertEqual(raw["warp_imbalance"]["warp"], region.warp_imbalance.where)

    def test_a_trace_is_read_through_smprof_stats(self):
        if not os.environ.get("SMPROF_BUILD_DIR"):
            self.skipTest("SMPROF_BUILD_DIR not set: the built `smprof` is not known")
        self.assertEqual(smprof.stats(self.trace), smprof.stats(self.trace + ".stats.json"))

    def test_frames_have_a_row_per_region_and_value(self):
        run = smprof.stats(self.trace + ".stats.json")
        if not _pandas_installed():
            with self.assertRaisesRegex(ImportError, "pip install pandas"):
                run.regions_frame()
            return
        regions = run.regions_frame()
        self.assertEqual(len(regions), len(run.kernels[0].regions))
        self.assertEqual(list(regions["region"]), [r.name for r in run.kernels[0].regions])
        self.assertEqual(len(run.values_frame()), len(run.kernels[0].values))


class BadInput(unittest.TestCase):
    def write(self, doc):
        f = tempfile.NamedTemporaryFile("w", suffix=".stats.json", delete=False)
        self.addCleanup(os.unlink, f.name)
        json.dump(doc, f)
        f.close()
        return f.name

    def test_a_file_that_is_not_smprof_statistics(self):
        with self.assertRaisesRegex(smprof.StatsError, "not smprof statistics"):
            smprof.stats(self.write({"format": "chrome"}))

    def test_a_missing_field_is_named_by_its_path(self):
        doc = {"format": "smprof-stats", "version": 1, "launches": 1, "slices": 1, "instants": 0,
               "kernels": [{"kernel": "k", "launches": 1, "warps": 1, "span_ns": 5, "warp_time_ns": 5,
                            "regions": [{"name": "r", "count": 1, "cycles": {}}]}]}
        with self.assertRaisesRegex(smprof.StatsError, r"stats\.kernels\[0\]\.regions\[0\]\.ns: missing"):
            smprof.stats(self.write(doc))

    def test_another_version(self):
        with self.assertRaisesRegex(smprof.StatsError, "reads version 1"):
            smprof.stats(self.write({"format": "smprof-stats", "version": 2}))

    def test_a_missing_file(self):
        with self.assertRaisesRegex(FileNotFoundError, "give a trace smprof-run wrote"):
            smprof.stats("/nonexistent/run.pftrace")


class Packaging(unittest.TestCase):
    def test_pip_installs_the_package_without_network(self):
        package = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        with tempfile.TemporaryDirectory() as target:
            done = subprocess.run(
                [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--target", target, package],
                capture_output=True, text=True, check=False)
            self.assertEqual(done.returncode, 0, done.stderr)
            probe = subprocess.run([sys.executable, "-c", "import smprof; print(smprof.__version__, smprof.__file__)"],
                                   capture_output=True, text=True, check=True, cwd=target,
                                   env={**os.environ, "PYTHONPATH": target})
            version, where = probe.stdout.split()
            self.assertEqual(version, smprof.__version__)
            self.assertTrue(where.startswith(target), where)


class ToolLookup(unittest.TestCase):
    def test_a_missing_tool_says_how_to_fix_it(self):
        with mock.patch.dict(os.environ, {"PATH": "", "SMPROF_HOME": "/nonexistent"}, clear=True):
            with self.assertRaises(smprof.ToolNotFound) as caught:
                smprof.tool_path("smprof-run")
        self.assertIn("/nonexistent/bin/smprof-run", str(caught.exception))
        self.assertIn("SMPROF_HOME", str(caught.exception))

    def test_the_build_directory_comes_before_path(self):
        build = os.environ.get("SMPROF_BUILD_DIR")
        if not build:
            self.skipTest("SMPROF_BUILD_DIR not set")
        with mock.patch.dict(os.environ, {"SMPROF_BUILD_DIR": build, "PATH": "/usr/bin"}, clear=True):
            self.assertEqual(smprof.tool_path("smprof"), os.path.join(build, "bin", "smprof"))


if __name__ == "__main__":
    unittest.main()
