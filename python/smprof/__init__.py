"""smprof from Python.

`stats(path)` reads the statistics of a run (what `smprof stats` prints) as
Python objects; `tool_path(name)` finds smprof's installed programs.
"""

from smprof._tools import ToolNotFound, tool_path
from smprof.stats import (
    AsyncSpans,
    Durations,
    Gap,
    Imbalance,
    Instants,
    KernelStats,
    Region,
    RunStats,
    StatsError,
    Values,
    WarpLocation,
    stats,
)

__version__ = "0.1.0"

__all__ = [
    "AsyncSpans",
    "Durations",
    "Gap",
    "Imbalance",
    "Instants",
    "KernelStats",
    "Region",
    "RunStats",
    "StatsError",
    "ToolNotFound",
    "Values",
    "WarpLocation",
    "stats",
    "tool_path",
]
