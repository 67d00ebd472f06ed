"""The statistics of an smprof run as Python objects.

smprof-run writes them beside every trace (<trace>.stats.json; the layout is
documented in collector/stats_report.h). `stats(path)` takes that file, or the
trace (then the built `smprof stats --json` reads the file beside it, or the
trace's own copy), and returns a RunStats. Unknown keys are ignored; a file
that is not smprof statistics raises StatsError naming what was wrong. With
pandas installed, `RunStats.regions_frame()` and `values_frame()` give one
row per kernel x region (or value name).
"""

import json
import os
import subprocess
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

from smprof._tools import tool_path

FORMAT = "smprof-stats"
VERSION = 1


class StatsError(ValueError):
    """A file or output that is not smprof statistics this package reads."""


@dataclass
class Durations:
    total: int
    mean: float
    p50: int
    p95: int
    max: int


@dataclass
class WarpLocation:
    pid: int
    launch_id: int
    gpu: int
    sm: int
    block: List[int]
    warp: int


@dataclass
class Imbalance:
    """max / mean of the per-SM (or per-warp) totals; `where` is the largest."""

    count: int
    max_ns: int
    mean_ns: float
    ratio: Optional[float]
    where: Dict[str, Any]


@dataclass
class Region:
    name: str
    phase: bool
    count: int
    unterminated: int
    percentiles_exact: bool
    ns: Durations
    cycles: Durations
    share: Optional[float]
    sm_imbalance: Optional[Imbalance]
    warp_imbalance: Optional[Imbalance]


@dataclass
class Instants:
    name: str
    count: int
    unmatched_ends: int


@dataclass
class Values:
    name: str
    source: str  # "slice", "instant" or "counter"
    count: int
    min: int
    max: int
    mean: float
    sum: int


@dataclass
class AsyncSpans:
    name: str
    count: int
    unterminated: int
    unmatched_ends: int
    percentiles_exact: bool
    ns: Durations
    min_ns: int


@dataclass
class KernelStats:
    kernel: str
    launches: int
    warps: int
    span_ns: int
    warp_time_ns: int
    regions: List[Region] = field(default_factory=list)
    instants: List[Instants] = field(default_factory=list)
    values: List[Values] = field(default_factory=list)
    async_spans: List[AsyncSpans] = field(default_factory=list)


@dataclass
class Gap:
    kernel: str
    warp: WarpLocation
    before: str
    after: str
    start_ns: int
    length_ns: int


@dataclass
class RunStats:
    launches: int
    slices: int
    unterminated: int
    instants: int
    lost_events: int
    kernels: List[KernelStats]
    gaps: List[Gap]
    async_spans: int = 0

    def kernel(self, name: str) -> KernelStats:
        """The kernel whose label is `name` (KeyError when the run has none)."""
        for k in self.kernels:
            if k.kernel == name:
                return k
        raise KeyError(f"no kernel {name!r} in this run (kernels: {[k.kernel for k in self.kernels]})")

    def regions_frame(self):
        """One row per kernel x region (pandas.DataFrame)."""
        pd = _pandas()
        rows = []
        for k in self.kernels:
            for r in k.regions:
                rows.append(
                    {
                        "kernel": k.kernel,
                        "region": r.name,
                        "phase": r.phase,
                        "count": r.count,
                        "unterminated": r.unterminated,
                        "total_ns": r.ns.total,
                        "mean_ns": r.ns.mean,
                        "p50_ns": r.ns.p50,
                        "p95_ns": r.ns.p95,
                        "max_ns": r.ns.max,
                        "mean_cycles": r.cycles.mean,
                        "share": r.share,
                        "sm_imbalance": r.sm_imbalance.ratio if r.sm_imbalance else None,
                        "warp_imbalance": r.warp_imbalance.ratio if r.warp_imbalance else None,
                    }
                )
        return pd.DataFrame(rows)

    def values_frame(self):
        """One row per kernel x value name and source (pandas.DataFrame)."""
        pd = _pandas()
        rows = [
            {"kernel": k.kernel, "name": v.name, "source": v.source, "count": v.count, "min": v.min, "max": v.max,
             "mean": v.mean, "sum": v.sum}
            for k in self.kernels
            for v in k.values
        ]
        return pd.DataFrame(rows)


def _pandas():
    try:
        import pandas  # noqa: PLC0415: optional
    except ImportError as e:
        raise ImportError("pandas is not installed: `pip install pandas` for DataFrames (the objects need none)") from e
    return pandas


class _Reader:
    """Typed access to one JSON object, errors naming the field's path."""

    def __init__(self, obj: Any, where: str):
        if not isinstance(obj, dict):
            raise StatsError(f"{where}: expected an object, got {type(obj).__name__}")
        self.obj = obj
        self.where = where

    def _get(self, key: str, kinds, default=None, optional=False):
        if key not in self.obj or self.obj[key] is None:
            if optional:
                return default
            raise StatsError(f"{self.where}.{key}: missing")
        value = self.obj[key]
        if isinstance(value, bool) and bool not in kinds:
            raise StatsError(f"{self.where}.{key}: expected a number, got {value!r}")
        if not isinstance(value, kinds):
            raise StatsError(f"{self.where}.{key}: expected {kinds}, got {value!r}")
        return value

    def int(self, key, optional=False, default=0):
        return self._get(key, (int,), default, optional)

    def num(self, key, optional=False, default=None):
        value = self._get(key, (int, float), default, optional)
        return None if value is None else float(value)

    def str(self, key):
        return self._get(key, (str,))

    def bool(self, key, default=False):
        return self._get(key, (bool,), default, optional=True)

    def child(self, key, optional=False):
        if optional and (key not in self.obj or self.obj[key] is None):
            return None
        return _Reader(self._get(key, (dict,)), f"{self.where}.{key}")

    def list(self, key, optional=True):
        items = self._get(key, (list,), [], optional)
        return [(_Reader(x, f"{self.where}.{key}[{i}]")) for i, x in enumerate(items)]


def _durations(r: _Reader) -> Durations:
    return Durations(r.int("total"), r.num("mean"), r.int("p50"), r.int("p95"), r.int("max"))


def _warp(r: _Reader) -> WarpLocation:
    block = r._get("block", (list,))
    return WarpLocation(r.int("pid"), r.int("launch_id"), r.int("gpu"), r.int("sm"), list(block), r.int("warp"))


def _imbalance(r: Optional[_Reader], count_key: str, where_key: str) -> Optional[Imbalance]:
    if r is None:
        return None
    where = {k: v for k, v in r.obj.items() if k not in (count_key, "max_ns", "mean_ns", "ratio")}
    if where_key in r.obj and isinstance(r.obj[where_key], dict):
        where = r.obj[where_key]
    return Imbalance(r.int(count_key), r.int("max_ns"), r.num("mean_ns"), r.num("ratio", optional=True), where)


def from_json(doc: Any) -> RunStats:
    """A RunStats from the parsed .stats.json (or `smprof stats --json`)."""
    r = _Reader(doc, "stats")
    if doc.get("format") != FORMAT:
        raise StatsError(f"stats.format: expected {FORMAT!r}, got {doc.get('format')!r}: not smprof statistics")
    if r.int("version") != VERSION:
        raise StatsError(f"stats.version: {doc.get('version')} (this package reads version {VERSION})")
    kernels = []
    for k in r.list("kernels", optional=False):
        regions = [
            Region(
                name=x.str("name"),
                phase=x.bool("phase"),
                count=x.int("count"),
                unterminated=x.int("unterminated", optional=True),
                percentiles_exact=x.bool("percentiles_exact", True),
                ns=_durations(x.child("ns")),
                cycles=_durations(x.child("cycles")),
                share=x.num("share", optional=True),
                sm_imbalance=_imbalance(x.child("sm_imbalance", optional=True), "sms", "where"),
                warp_imbalance=_imbalance(x.child("warp_imbalance", optional=True), "warps", "warp"),
            )
            for x in k.list("regions")
        ]
        instants = [Instants(x.str("name"), x.int("count"), x.int("unmatched_ends", optional=True))
                    for x in k.list("instants")]
        values = [
            Values(x.str("name"), x.str("source"), x.int("count"), x.int("min"), x.int("max"), x.num("mean"),
                   x.int("sum"))
            for x in k.list("values")
        ]
        spans = [
            AsyncSpans(x.str("name"), x.int("count"), x.int("unterminated", optional=True),
                       x.int("unmatched_ends", optional=True), x.bool("percentiles_exact", True),
                       _durations(x.child("ns")), x.int("min_ns", optional=True))
            for x in k.list("async_spans")
        ]
        kernels.append(
            KernelStats(k.str("kernel"), k.int("launches"), k.int("warps"), k.int("span_ns"), k.int("warp_time_ns"),
                        regions, instants, values, spans))
    gaps = [
        Gap(g.str("kernel"), _warp(g.child("warp")), g.str("before"), g.str("after"), g.int("start_ns"),
            g.int("length_ns"))
        for g in r.list("gaps")
    ]
    return RunStats(r.int("launches"), r.int("slices"), r.int("unterminated", optional=True), r.int("instants"),
                    r.int("lost_events", optional=True), kernels, gaps, r.int("async_spans", optional=True))


def stats(path: str) -> RunStats:
    """The statistics of the run at `path`: a trace (.pftrace, .json) or its .stats.json."""
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: no such file (give a trace smprof-run wrote, or its .stats.json)")
    if path.endswith(".stats.json"):
        with open(path, "rb") as f:
            text = f.read().decode("utf-8", errors="replace")
    else:
        done = subprocess.run([tool_path("smprof"), "stats", "--json", path], capture_output=True, check=False)
        if done.returncode != 0:
            raise StatsError(f"smprof stats {path}: {done.stderr.decode(errors='replace').strip()}")
        text = done.stdout.decode("utf-8", errors="replace")
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise StatsError(f"{path}: not JSON ({e})") from e
    return from_json(doc)
