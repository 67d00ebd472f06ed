"""Where smprof's programs are: one lookup, used by every part of the package.

Order: $SMPROF_HOME/bin (an install prefix), $SMPROF_BUILD_DIR/bin (a build
directory, as the tests and scripts/ set it), then PATH. A program that is
in none of them raises ToolNotFound, which says where it looked and how to
fix it.
"""

import os
import shutil
from typing import List


class ToolNotFound(FileNotFoundError):
    """An smprof program that is not installed where the package looks."""


def _candidates(name: str) -> List[str]:
    out = []
    for variable in ("SMPROF_HOME", "SMPROF_BUILD_DIR"):
        root = os.environ.get(variable)
        if root:
            out.append(os.path.join(root, "bin", name))
    return out


def tool_path(name: str) -> str:
    """The path of smprof program `name` ("smprof", "smprof-run", ...)."""
    looked = []
    for path in _candidates(name):
        looked.append(path)
        if os.path.isfile(path) and os.access(path, os.X_OK):
            return path
    found = shutil.which(name)
    if found:
        return found
    looked.append("PATH")
    raise ToolNotFound(
        f"{name} not found (looked in {', '.join(looked)}): build smprof (README: scripts/build.sh) and set "
        f"SMPROF_BUILD_DIR to its build directory, or install it (cmake --install) and set SMPROF_HOME to the "
        f"prefix or put its bin/ on PATH"
    )
