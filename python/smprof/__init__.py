"""smprof from Python.

`profile(path, ...)` profiles a `with` block of a program that was not
started under smprof-run; `stats(path)` reads the statistics of a run (what
`smprof stats` prints) as Python objects; `tool_path(name)` finds smprof's
installed programs. `smprof.triton` has the markers for Triton kernels.
"""

from smprof._tools import ToolNotFound, tool_path
from smprof.profile import ProfileError, ProfileWarning, profile
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
    "ProfileError",
    "ProfileWarning",
    "Region",
    "RunStats",
    "StatsError",
    "ToolNotFound",
    "Values",
    "WarpLocation",
    "profile",
    "stats",
    "tool_path",
]
