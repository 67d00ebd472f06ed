"""Profile a block of a running Python program: `with smprof.profile("t.pftrace"): ...`.

For programs not started under smprof-run. On entry the block starts
`smprof-run --serve` (runner/serve_session.h), which checks the output and
starts the collector, then prints the variables the injector needs; they go
into os.environ, the injector (libsmprof_inject.so) is loaded into this
process with ctypes and its InitializeInjection() starts profiling. On exit
(also when the body raised) the CUDA work queued so far is waited for,
smprof_inject_stop() ships the last harvest, os.environ is restored and
smprof-run is told to finish: it writes the trace, prints its summary on
stderr and tells where the files are (the handle's attributes).

One profiling session per process: the injector cannot start again once it
stopped (CUPTI's callbacks end for good), so a second profile() raises, as
does a nested one or one in a process that runs under smprof-run (which
profiles it already). Kernels launched before the block are not profiled; a
CUDA graph instantiated before the block records nothing when replayed in it.

Without an NVIDIA driver (no libcuda.so.1) nothing can be profiled: the block
runs, a ProfileWarning says why, and the trace holds the run's metadata only,
as `smprof-run -- python script.py` would write on that machine.
"""

import ctypes
import json
import os
import selectors
import subprocess
import threading
import time
import warnings
from typing import Dict, Iterable, List, Optional, Sequence, Union

from smprof._tools import tool_path
from smprof.stats import RunStats
from smprof.stats import stats as read_stats

READY_TIMEOUT_S = 30.0  # smprof-run gives the collector 10 s to start
FINISH_TIMEOUT_S = 120.0  # smprof-run kills a collector that takes 30 s to finish

_DRIVER = "libcuda.so.1"
_lock = threading.Lock()
_active: Optional["profile"] = None  # the session in progress
_ended: Optional[str] = None  # what the finished session wrote: one per process


class ProfileError(RuntimeError):
    """smprof.profile() could not start or finish; the message says why and what to do."""


class ProfileWarning(RuntimeWarning):
    """The block ran but could not be profiled (e.g. no NVIDIA driver)."""


def _joined(value: Union[None, str, int, Iterable], what: str) -> Optional[str]:
    """A setting as smprof-run takes it: a string, or the items joined with ','."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return str(value)
    try:
        return ",".join(str(v) for v in value)
    except TypeError:
        raise TypeError(f"{what}: expected a string or a list of them, got {type(value).__name__}") from None


def _read_line(stream, deadline: float) -> Optional[bytes]:
    """One line from `stream` (a pipe), or None at its end; TimeoutError past `deadline`."""
    data = b""
    with selectors.DefaultSelector() as sel:
        sel.register(stream, selectors.EVENT_READ)
        while not data.endswith(b"\n"):
            left = deadline - time.monotonic()
            if left <= 0 or not sel.select(left):
                raise TimeoutError
            chunk = os.read(stream.fileno(), 1)  # byte by byte: nothing past the line is taken
            if not chunk:
                return data or None
            data += chunk
    return data


def _synchronize_devices() -> None:
    """Waits for the work queued on this thread's CUDA context and on every active primary context.

    Without it the injector's last harvest would still wait for kernels that
    record, but for 5 s at most per context (Harvest's kForce deadline); then it
    gives their events up. A block's queued work may take longer than that, and
    the user means "profile what this block did", so wait as
    torch.cuda.synchronize() would, on each device. A context made with
    cuCtxCreate on another thread is left to the harvest's bounded wait. Nothing
    here loads the driver or initialises CUDA: a process that never used CUDA has
    nothing to wait for. Errors (a failed kernel's sticky error) are the
    program's business and are ignored here.
    """
    try:
        cuda = ctypes.CDLL(_DRIVER, mode=os.RTLD_LOCAL | os.RTLD_NOLOAD)
    except OSError:
        return
    ctx = ctypes.c_void_p()
    if cuda.cuCtxGetCurrent(ctypes.byref(ctx)) == 0 and ctx.value:
        cuda.cuCtxSynchronize()
    count = ctypes.c_int()
    if cuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return  # CUDA not initialised
    for ordinal in range(count.value):
        device, flags, active = ctypes.c_int(), ctypes.c_uint(), ctypes.c_int()
        if cuda.cuDeviceGet(ctypes.byref(device), ordinal) != 0:
            continue
        if cuda.cuDevicePrimaryCtxGetState(device, ctypes.byref(flags), ctypes.byref(active)) != 0 or not active.value:
            continue
        primary = ctypes.c_void_p()
        if cuda.cuDevicePrimaryCtxRetain(ctypes.byref(primary), device) != 0:
            continue
        if cuda.cuCtxPushCurrent_v2(primary) == 0:
            cuda.cuCtxSynchronize()
            cuda.cuCtxPopCurrent_v2(ctypes.byref(ctypes.c_void_p()))
        cuda.cuDevicePrimaryCtxRelease_v2(device)


def _already_loaded(path: str) -> bool:
    try:
        ctypes.CDLL(path, mode=os.RTLD_LOCAL | os.RTLD_NOLOAD)
    except OSError:
        return False
    return True


class profile:
    """Profiles the CUDA kernels this process launches inside a `with` block.

        with smprof.profile("t.pftrace", kernels="matmul*") as run:
            model(x)
        print(run.output, run.launches)
        table = run.stats()

    `output`: the trace (.pftrace, or .json for Chrome JSON); statistics go
    beside it. `kernels`, `launches`, `warps`: as smprof-run's --kernels,
    --launches, --warps (a string, or a list joined with ','). `force`:
    overwrite an existing output. `extra_args`: more smprof-run options, e.g.
    ("--buffer-mb", "256"). `quiet`: no summary on stderr.

    After the block: `output` is where the trace is (beside the path asked for
    if a file appeared there meanwhile), `stats_json` and `stats_csv` the
    statistics ("" if none), `launches`, `events` and `lost_events` the counts,
    `profiled` whether the injector profiled (False without a driver, or when
    it stepped aside: the summary says why), `stats()` the RunStats.
    """

    def __init__(
        self,
        output: Union[str, "os.PathLike[str]"],
        *,
        kernels: Union[None, str, Sequence[str]] = None,
        launches: Union[None, str, Sequence[str]] = None,
        warps: Union[None, str, int, Iterable[int]] = None,
        force: bool = False,
        extra_args: Sequence[str] = (),
        quiet: bool = False,
    ):
        self.output = os.path.abspath(os.fspath(output))
        self.stats_json = ""
        self.stats_csv = ""
        self.launches = 0
        self.events = 0
        self.lost_events = 0
        self.profiled = False
        self.finished = False
        self._args: List[str] = ["-o", self.output]
        for option, value in (("--kernels", kernels), ("--launches", launches), ("--warps", warps)):
            text = _joined(value, option[2:])
            if text is not None:
                self._args += [option, text]
        if force:
            self._args.append("--force")
        if quiet:
            self._args.append("--quiet")
        if isinstance(extra_args, str):
            raise TypeError("extra_args: expected a list of arguments, got a string (write ['--buffer-mb', '256'])")
        self._args += [str(a) for a in extra_args]
        self._pid = 0  # the process that entered the block
        self._proc: Optional[subprocess.Popen] = None
        self._saved_env: Dict[str, Optional[str]] = {}
        self._injector = None

    # --- entry ---------------------------------------------------------------

    def __enter__(self) -> "profile":
        global _active, _ended
        with _lock:
            if _active is not None:
                raise ProfileError(
                    f"smprof.profile() is already active in this process (writing {_active.output}): "
                    "profile blocks cannot nest or overlap; use one block around all the work"
                )
            if _ended is not None:
                raise ProfileError(
                    f"this process already had its profiling session (written to {_ended}): smprof's injector "
                    "cannot start again once it stopped (one session per process); put all the work in one "
                    "block, or profile each part in its own process"
                )
            if os.environ.get("SMPROF_RUN_ID"):
                raise ProfileError(
                    "this process runs under smprof-run (SMPROF_RUN_ID is set), which profiles all of it: "
                    "drop the smprof.profile() block, or run the program without smprof-run"
                )
            _active = self
        try:
            self._start()
        except BaseException:
            with _lock:
                _active = None
            raise
        return self

    def _start(self) -> None:
        self._pid = os.getpid()
        command = [tool_path("smprof-run"), "--serve", "--serve-pid", str(self._pid)] + self._args
        self._proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        try:
            env = self._wait_ready()
            self._set_environment(env)
            self._load_injector(env["SMPROF_INJECTOR"])
        except BaseException:
            self._restore_environment()
            self._finish(discard=True)
            raise

    def _wait_ready(self) -> Dict[str, str]:
        proc = self._proc
        try:
            line = _read_line(proc.stdout, time.monotonic() + READY_TIMEOUT_S)
        except TimeoutError:
            proc.kill()
            proc.wait()
            raise ProfileError(
                f"smprof-run --serve was not ready within {READY_TIMEOUT_S:g} s and was stopped; rerun with "
                "extra_args=['--log-level', 'debug'] to see why"
            ) from None
        if line is None:
            code = proc.wait()
            usage = " (a usage error: a bad option, or an output that exists: force=True overwrites it)"
            raise ProfileError(
                f"smprof-run --serve exited with status {code} before it was ready{usage if code == 2 else ''}; "
                "its message is above, on stderr"
            )
        try:
            ready = json.loads(line)
            env = ready["env"]
            if ready.get("ready") is not True or not all(isinstance(v, str) for v in env.values()):
                raise ValueError("not a ready line")
            if "SMPROF_RUN_ID" not in env or "SMPROF_INJECTOR" not in env:
                raise ValueError("the ready line lacks the run id or the injector")
        except (ValueError, KeyError, TypeError, AttributeError):
            raise ProfileError(
                f"smprof-run --serve wrote {line[:200]!r} where the ready line was expected: this smprof package "
                f"and {proc.args[0]} do not match; install both from one smprof build"
            ) from None
        return env

    def _set_environment(self, env: Dict[str, str]) -> None:
        for name, value in env.items():
            self._saved_env.setdefault(name, os.environ.get(name))
            os.environ[name] = value

    def _restore_environment(self) -> None:
        for name, value in self._saved_env.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        self._saved_env = {}

    def _load_injector(self, path: str) -> None:
        if _already_loaded(path):
            raise ProfileError(
                f"{path} is already loaded in this process (CUDA_INJECTION64_PATH or LD_PRELOAD named it, or "
                "another copy of the smprof package started it): it profiles one session per process and cannot "
                "start another; unset those variables, or run the program under smprof-run"
            )
        try:
            ctypes.CDLL(_DRIVER, mode=os.RTLD_LOCAL)
        except OSError as e:
            warnings.warn(
                f"smprof: {_DRIVER} cannot be loaded ({e}): this machine has no NVIDIA driver, so nothing in "
                "this block is profiled; the trace will hold the run's metadata only",
                ProfileWarning,
                stacklevel=4,
            )
            return
        try:
            injector = ctypes.CDLL(path, mode=os.RTLD_LOCAL)
        except OSError as e:
            raise ProfileError(f"cannot load smprof's injector: {e}; rebuild or reinstall smprof") from None
        injector.InitializeInjection.restype = ctypes.c_int
        injector.smprof_inject_stop.restype = ctypes.c_int
        self._injector = injector
        injector.InitializeInjection()  # logs and returns if it cannot profile: the summary says why

    # --- exit ----------------------------------------------------------------

    def __exit__(self, exc_type, exc, tb) -> bool:
        global _active, _ended
        if os.getpid() != self._pid:
            # A child forked in the block leaves it: the session (and the pipe
            # to smprof-run it inherited) is its parent's; only its environment
            # is its own.
            self._restore_environment()
            return False
        try:
            if self._injector is not None:
                try:
                    _synchronize_devices()
                except (OSError, AttributeError):
                    pass  # a driver without these entry points: the last harvest's bounded wait remains
                self.profiled = self._injector.smprof_inject_stop() == 1
            self._restore_environment()
            self._finish(discard=False, raise_errors=exc_type is None)
        finally:
            with _lock:
                _active = None
                _ended = self.output
        return False

    def _finish(self, discard: bool, raise_errors: bool = False) -> None:
        """Tells smprof-run to end the run and waits for it; `discard`: remove what it wrote (nothing ran)."""
        proc = self._proc
        try:
            proc.stdin.write(b"stop\n")
            proc.stdin.flush()
        except OSError:
            pass  # it has exited already: its status says how
        try:
            proc.stdin.close()
        except OSError:
            pass
        done = None
        try:
            line = _read_line(proc.stdout, time.monotonic() + FINISH_TIMEOUT_S)
            code = proc.wait(timeout=FINISH_TIMEOUT_S)
        except (TimeoutError, subprocess.TimeoutExpired):
            proc.kill()
            proc.wait()
            error = (
                f"smprof-run did not finish the trace within {FINISH_TIMEOUT_S:g} s and was stopped; "
                f"what it wrote is in {self.output} or {self.output}.partial"
            )
            if raise_errors:
                raise ProfileError(error) from None
            warnings.warn(f"smprof: {error}", ProfileWarning, stacklevel=3)
            return
        finally:
            proc.stdout.close()
        try:
            done = json.loads(line) if line else None
        except ValueError:
            done = None
        if isinstance(done, dict) and done.get("done") is True:
            self.output = done.get("trace") or self.output
            self.stats_json = done.get("stats_json") or ""
            self.stats_csv = done.get("stats_csv") or ""
            self.launches = int(done.get("launches", 0))
            self.events = int(done.get("events", 0))
            self.lost_events = int(done.get("lost_events", 0))
        if discard:
            if isinstance(done, dict) and done.get("done") is True:
                for path in (self.output, self.stats_json, self.stats_csv):
                    if path and os.path.isfile(path):
                        os.unlink(path)
            return
        self.finished = True
        if code != 0 or not (isinstance(done, dict) and done.get("ok") is True):
            error = (
                f"smprof-run ended with status {code}: the trace may be incomplete or missing; "
                "its messages are above, on stderr"
            )
            if raise_errors:
                raise ProfileError(error)
            warnings.warn(f"smprof: {error}", ProfileWarning, stacklevel=3)

    # --- results -------------------------------------------------------------

    def stats(self) -> RunStats:
        """The run's statistics (smprof.stats()), once the block has ended."""
        if not self.finished:
            raise ProfileError("the statistics are written when the profile block ends: call stats() after it")
        return read_stats(self.stats_json or self.output)

    def __repr__(self) -> str:
        state = "finished" if self.finished else ("active" if _active is self else "not started")
        return f"smprof.profile({self.output!r}, {state})"
