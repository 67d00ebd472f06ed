"""A PEP 517 build backend with no dependencies, so that `pip install ./python`
needs neither network nor setuptools/wheel (the machines smprof targets may
have neither, and no way to fetch them).

It builds a pure-Python wheel (py3-none-any) of the `smprof` package: the
files under python/smprof, a METADATA from the fields below, a WHEEL file
and a RECORD with each file's sha256, as the wheel format (PEP 427) asks.
The sdist is the package, this backend and pyproject.toml.
"""

import base64
import hashlib
import io
import os
import re
import tarfile
import zipfile

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _version() -> str:
    """smprof/__init__.py's __version__: the one place the version is written."""
    with open(os.path.join(_ROOT, "smprof", "__init__.py")) as f:
        found = re.search(r'^__version__ = "([^"]+)"$', f.read(), re.M)
    if not found:
        raise RuntimeError("python/smprof/__init__.py has no __version__ line")
    return found.group(1)


NAME = "smprof"
VERSION = _version()
SUMMARY = "smprof from Python: statistics of smprof runs, and the tools' location"
REQUIRES_PYTHON = ">=3.9"
TAG = "py3-none-any"

_DIST_INFO = f"{NAME}-{VERSION}.dist-info"


def _metadata() -> str:
    return (
        "Metadata-Version: 2.1\n"
        f"Name: {NAME}\n"
        f"Version: {VERSION}\n"
        f"Summary: {SUMMARY}\n"
        f"Requires-Python: {REQUIRES_PYTHON}\n"
        "Provides-Extra: pandas\n"
        'Requires-Dist: pandas; extra == "pandas"\n'
    )


def _wheel_file() -> str:
    return f"Wheel-Version: 1.0\nGenerator: smprof_build\nRoot-Is-Purelib: true\nTag: {TAG}\n"


def _package_files():
    base = os.path.join(_ROOT, NAME)
    for directory, dirs, files in os.walk(base):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            if name.endswith((".pyc", ".pyo")):
                continue
            path = os.path.join(directory, name)
            yield path, os.path.relpath(path, _ROOT).replace(os.sep, "/")


def _record_line(arcname: str, data: bytes) -> str:
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{arcname},sha256={digest},{len(data)}"


def get_requires_for_build_wheel(config_settings=None):
    return []


def get_requires_for_build_sdist(config_settings=None):
    return []


def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    out = os.path.join(metadata_directory, _DIST_INFO)
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "METADATA"), "w") as f:
        f.write(_metadata())
    with open(os.path.join(out, "WHEEL"), "w") as f:
        f.write(_wheel_file())
    return _DIST_INFO


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    filename = f"{NAME}-{VERSION}-{TAG}.whl"
    records = []
    with zipfile.ZipFile(os.path.join(wheel_directory, filename), "w", zipfile.ZIP_DEFLATED) as wheel:
        entries = [(arcname, open(path, "rb").read()) for path, arcname in _package_files()]
        entries.append((f"{_DIST_INFO}/METADATA", _metadata().encode()))
        entries.append((f"{_DIST_INFO}/WHEEL", _wheel_file().encode()))
        for arcname, data in entries:
            wheel.writestr(arcname, data)
            records.append(_record_line(arcname, data))
        records.append(f"{_DIST_INFO}/RECORD,,")
        wheel.writestr(f"{_DIST_INFO}/RECORD", "\n".join(records) + "\n")
    return filename


def build_sdist(sdist_directory, config_settings=None):
    stem = f"{NAME}-{VERSION}"
    filename = f"{stem}.tar.gz"
    with tarfile.open(os.path.join(sdist_directory, filename), "w:gz") as sdist:
        files = list(_package_files())
        files += [(os.path.join(_ROOT, p), p) for p in ("pyproject.toml", "README.md", "_build/smprof_build.py")]
        for path, arcname in files:
            sdist.add(path, arcname=f"{stem}/{arcname}")
        info = _metadata().encode()
        member = tarfile.TarInfo(f"{stem}/PKG-INFO")
        member.size = len(info)
        sdist.addfile(member, io.BytesIO(info))
    return filename
