"""Everything pd-doctor started, and the one signal policy that stops it all.

A registry of the process groups (by leader PID) and temporary directories this pd-doctor process
created. `install()` is called once, at the CLI boundary: SIGINT, SIGTERM and SIGHUP then stop
every registered group (TERM, then KILL after a grace; processes that left the group with setsid
are found as psutil descendants recorded before the TERM), remove the registered temp dirs and
end pd-doctor with 130, 143 or 129.

`spawn()` starts a child in its own session and registers it with no window in between: a signal
that arrives while a child is being started is held until the child is registered (the handler
runs in the main thread only, so a per-thread "starting" depth and a lock are enough). Blocking
the signals with `pthread_sigmask` instead would leak the blocked mask into the child, which
then ignores the TERM it is stopped with.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # psutil is imported where used: `import vllm_pd_doctor.cli` stays light
    import psutil

EXIT_CODES: dict[int, int] = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}
"""The exit code for each signal pd-doctor handles (128 + signal number)."""
SIGNALS = tuple(EXIT_CODES)
GRACE_S = 3.0
"""Seconds between TERM and KILL when stopping on a signal."""


class Interrupted(KeyboardInterrupt):
    """Raised in the main thread after a handled signal, once everything was stopped."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum

    @property
    def exit_code(self) -> int:
        return EXIT_CODES.get(self.signum, 128 + self.signum)


@dataclass
class _Registry:
    lock: threading.RLock = field(default_factory=threading.RLock)
    """Re-entrant: a worker thread holds it across spawn() (see _starting) and registers inside."""
    groups: dict[int, float] = field(default_factory=dict)
    """Leader PID -> its create time (guards against a reused PID)."""
    tempdirs: list[str] = field(default_factory=list)
    stopping: int | None = None
    """The signal being handled, once one arrived."""
    pending: int | None = None
    """A signal that arrived while the main thread was starting a child."""
    starting: int = 0
    """How deep the main thread is inside spawn() (the handler waits for 0)."""
    installed: bool = False


_R = _Registry()


def _create_time(pid: int) -> float:
    import psutil

    try:
        return psutil.Process(pid).create_time()
    except (psutil.Error, OSError):
        return 0.0


def register(pid: int) -> None:
    """Record a process group (its leader's PID) to stop on a signal."""
    with _R.lock:
        _R.groups[pid] = _create_time(pid)


def unregister(pid: int) -> None:
    with _R.lock:
        _R.groups.pop(pid, None)


def register_tempdir(path: str) -> None:
    """Record a temporary directory (or file) to remove on a signal."""
    with _R.lock:
        _R.tempdirs.append(path)


def unregister_tempdir(path: str) -> None:
    with _R.lock, suppress(ValueError):
        _R.tempdirs.remove(path)


def registered() -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The registered leader PIDs and temp dirs (for tests and --debug)."""
    with _R.lock:
        return tuple(_R.groups), tuple(_R.tempdirs)


@contextmanager
def tempdir(prefix: str) -> Iterator[str]:
    """A temporary directory removed on exit, and by the signal handler if one arrives."""
    with _starting():
        path = tempfile.mkdtemp(prefix=prefix)
        register_tempdir(path)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)
        unregister_tempdir(path)


@contextmanager
def _starting() -> Iterator[None]:
    """A section the signal handler must not interrupt (it is deferred to the end)."""
    main = threading.current_thread() is threading.main_thread()
    if main:
        _R.starting += 1
    try:
        if main:
            yield
        else:
            with _R.lock:  # the handler takes the lock: it waits until the child is registered
                yield
    finally:
        if main:
            _R.starting -= 1
            if _R.starting == 0 and _R.pending is not None:
                signum, _R.pending = _R.pending, None
                _handle(signum, None)


def spawn(cmd: Sequence[str], **kwargs: Any) -> subprocess.Popen[Any]:
    """`subprocess.Popen` in a new session, registered for the signal policy before it returns.

    Raises `Interrupted` without starting anything once pd-doctor is stopping. The caller
    calls `release(proc)` when done with it (which stops what is left of its group).
    """
    kwargs.setdefault("start_new_session", True)
    kwargs.setdefault("stdin", subprocess.DEVNULL)
    with _starting():
        if _R.stopping is not None:
            raise Interrupted(_R.stopping)
        proc: subprocess.Popen[Any] = subprocess.Popen(list(cmd), **kwargs)
        if threading.current_thread() is threading.main_thread():
            register(proc.pid)
        else:  # the lock is already held by _starting()
            _R.groups[proc.pid] = _create_time(proc.pid)
    return proc


def release(proc: subprocess.Popen[Any], grace: float = 5.0) -> None:
    """Stop what is left of a spawned child's group (by PID) and forget it."""
    stop_group(proc, grace=grace)
    unregister(proc.pid)


def run(cmd: Sequence[str], *, timeout: float, **kwargs: Any) -> subprocess.CompletedProcess[Any]:
    """Like `subprocess.run(capture_output=True)`, but the child's whole group is stopped on a
    timeout or an error, not only its leader. Raises subprocess.TimeoutExpired after stopping it.
    """
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    proc = spawn(cmd, **kwargs)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        release(proc, grace=2.0)
        proc.communicate()
        raise
    except BaseException:
        release(proc, grace=2.0)
        raise
    release(proc, grace=2.0)  # grandchildren left behind by a finished leader
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _kill_group(pgid: int, sig: int) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def stop_group(proc: subprocess.Popen[Any], grace: float = 5.0) -> None:
    """TERM the child's process group, then KILL it after `grace` seconds. By PID only."""
    if proc.poll() is not None:
        _kill_group(proc.pid, signal.SIGKILL)  # orphans of a dead leader
        return
    _kill_group(proc.pid, signal.SIGTERM)
    with suppress(subprocess.TimeoutExpired):
        proc.wait(timeout=grace)
    _kill_group(proc.pid, signal.SIGKILL)
    with suppress(subprocess.TimeoutExpired):  # pragma: no cover - kernel did not reap
        proc.wait(timeout=grace)


def _descendants(pid: int, created: float) -> list[psutil.Process]:
    import psutil

    try:
        p = psutil.Process(pid)
        if created and abs(p.create_time() - created) > 0.01:
            return []  # the PID was reused
        return [p, *p.children(recursive=True)]
    except (psutil.Error, OSError):
        return []


def stop_all(grace: float = GRACE_S) -> None:
    """Stop every registered group and its recorded descendants; remove the temp dirs."""
    with _R.lock:
        groups = dict(_R.groups)
        dirs = list(_R.tempdirs)
    if groups:  # nothing started: no psutil import (in a signal handler)
        _stop_groups(groups, grace)
    for d in dirs:
        _remove(d)
    with _R.lock:
        for pid in groups:
            _R.groups.pop(pid, None)
        for d in dirs:
            with suppress(ValueError):
                _R.tempdirs.remove(d)


def _stop_groups(groups: dict[int, float], grace: float) -> None:
    """SIGTERM, then SIGKILL after `grace`, each group and its recorded descendants; reap."""
    import psutil  # already imported by register()

    procs: dict[int, psutil.Process] = {}
    for pid, created in groups.items():
        for p in _descendants(pid, created):
            procs[p.pid] = p
    for pid in groups:
        _kill_group(pid, signal.SIGTERM)
    for p in procs.values():
        with suppress(psutil.Error, OSError):
            p.terminate()
    _gone, alive = psutil.wait_procs(list(procs.values()), timeout=grace)
    for pid in groups:
        _kill_group(pid, signal.SIGKILL)
    for p in alive:
        with suppress(psutil.Error, OSError):
            p.kill()
    psutil.wait_procs(alive, timeout=grace)
    _reap(groups)


def _remove(path: str) -> None:
    """Remove a registered temp dir (or temp file); never follows a link."""
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with suppress(OSError):
            os.unlink(path)


def _reap(groups: dict[int, float]) -> None:
    """Collect the exit status of our own dead children (no zombies left for psutil to see)."""
    for pid in groups:
        with suppress(ChildProcessError, OSError):
            os.waitpid(pid, os.WNOHANG)


def _handle(signum: int, frame: Any) -> None:
    if _R.starting > 0:  # a child is being started in the main thread: finish registering it
        _R.pending = signum
        return
    if _R.stopping is not None:
        return  # already stopping: a second signal does not cut the cleanup short
    _R.stopping = signum
    for sig in SIGNALS:
        with suppress(ValueError, OSError):
            signal.signal(sig, signal.SIG_IGN)
    with suppress(OSError, ValueError):
        print(
            f"pd-doctor: {signal.Signals(signum).name} received: stopping what pd-doctor started",
            file=sys.stderr,
            flush=True,
        )
    stop_all()
    raise Interrupted(signum)


def install() -> None:
    """Install the handler for SIGINT, SIGTERM and SIGHUP (once, from the main thread)."""
    if _R.installed or threading.current_thread() is not threading.main_thread():
        return
    for sig in SIGNALS:
        if sig == signal.SIGHUP and signal.getsignal(sig) is signal.SIG_IGN:
            continue  # started under nohup: keep ignoring hang-ups
        signal.signal(sig, _handle)
    _R.installed = True


def stopped_by() -> int | None:
    """The signal pd-doctor is stopping on, if one arrived."""
    return _R.stopping


def finish(code: int) -> None:
    """Exit after a handled signal without waiting for worker threads (they may be blocked on
    children that are gone)."""
    stop_all(grace=1.0)
    with suppress(Exception):
        sys.stdout.flush()
    with suppress(Exception):
        sys.stderr.flush()
    os._exit(code)


def wait_gone(pids: Sequence[int], timeout: float = 10.0) -> list[int]:
    """PIDs of `pids` still alive after `timeout` seconds (test helper)."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _alive(p)]
        if alive:
            time.sleep(0.05)
    return alive


def _alive(pid: int) -> bool:
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except (psutil.Error, OSError):
        return False
