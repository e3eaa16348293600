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
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # psutil is imported where used: `import vllm_pd_doctor.cli` stays light
    import psutil

from vllm_pd_doctor.infra import reaper

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
    closing: bool = False
    """The error boundary has its exit code: a signal now ends the run at once (nothing is left to
    unwind, and an exception raised there would reach no handler)."""
    installed: bool = False
    tags: dict[int, str] = field(default_factory=dict)
    """Leader PID -> the PD_DOCTOR_OWNER marker its process tree carries."""
    seq: int = 0
    watchdog: reaper.Watchdog | None = None


_R = _Registry()
_RUN: list[str] = []


def run_id() -> str:
    """This pd-doctor process's marker prefix (`<pid>.<random>`): children carry `<run>.<n>`."""
    if not _RUN or not _RUN[0].startswith(f"{os.getpid()}."):
        _RUN[:] = [f"{os.getpid()}.{secrets.token_hex(4)}"]
    return _RUN[0]


def _watchdog() -> reaper.Watchdog | None:
    """The watchdog (started with the first child or temp dir, in the CLI process only)."""
    if _R.watchdog is None and _R.installed:
        _R.watchdog = reaper.Watchdog(run_id())
        with suppress(OSError):
            _R.watchdog.start()
    return _R.watchdog


def _tell(op: str, arg: object) -> None:
    wd = _R.watchdog
    if wd is not None:
        wd.send(op, arg)


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
        _watchdog()
        _tell("g", pid)


def unregister(pid: int) -> None:
    with _R.lock:
        _R.groups.pop(pid, None)
        _R.tags.pop(pid, None)
        _tell("u", pid)


def register_tempdir(path: str) -> None:
    """Record a temporary directory (or file) to remove on a signal."""
    with _R.lock:
        _R.tempdirs.append(path)
        _watchdog()
        _tell("d", path)


def unregister_tempdir(path: str) -> None:
    with _R.lock, suppress(ValueError):
        _R.tempdirs.remove(path)
        _tell("r", path)


def registered() -> tuple[tuple[int, ...], tuple[str, ...]]:
    """The registered leader PIDs and temp dirs (for tests and --debug)."""
    with _R.lock:
        return tuple(_R.groups), tuple(_R.tempdirs)


@contextmanager
def tempdir(prefix: str) -> Iterator[str]:
    """A temporary directory removed on exit, and by the signal handler if one arrives.

    Named `pd-doctor-<pid>-<prefix>…`, so a later run removes it if this one was SIGKILLed
    (and its watchdog too)."""
    with _starting():
        name = prefix.removeprefix(reaper.TEMP_PREFIX)
        path = tempfile.mkdtemp(prefix=f"{reaper.TEMP_PREFIX}{os.getpid()}-{name}")
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
        with _R.lock:
            _R.seq += 1
            tag = f"{run_id()}.{_R.seq}"
            _watchdog()
        given = kwargs.get("env")
        env: dict[str, str] = dict(given if given is not None else os.environ)
        env[reaper.MARKER_VAR] = tag  # inherited by every descendant, setsid or not
        kwargs["env"] = env
        proc: subprocess.Popen[Any] = subprocess.Popen(list(cmd), **kwargs)
        with _R.lock:  # re-entrant: a worker thread already holds it (see _starting)
            _R.tags[proc.pid] = tag
            register(proc.pid)
    return proc


def release(proc: subprocess.Popen[Any], grace: float = 5.0) -> None:
    """Stop what is left of a spawned child's group (by PID), and its descendants that left
    the group (setsid) and the process tree (their parent exited): by its marker. Forget it."""
    stop_group(proc, grace=grace)
    with _R.lock:
        tag = _R.tags.get(proc.pid)
    if tag is not None:
        reaper.stop(tag, exact=True, grace=grace)
    unregister(proc.pid)


MAX_CAPTURE = 4 * 1024 * 1024
"""Bytes of each captured stream `run` keeps (the last ones): a child that writes 400 MB
costs pd-doctor this much memory, not 400 MB."""


class TailReader(threading.Thread):
    """Reads a pipe to its end on a thread, keeping only the last `keep` bytes."""

    def __init__(self, pipe: Any, keep: int = MAX_CAPTURE) -> None:
        super().__init__(daemon=True, name="pd-doctor-tail")
        self.pipe, self.keep = pipe, keep
        self.chunks: list[bytes] = []
        self.size = 0
        self.total = 0

    def run(self) -> None:
        fd = self.pipe.fileno()
        while True:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                break
            if not chunk:
                break
            self.total += len(chunk)
            self.chunks.append(chunk)
            self.size += len(chunk)
            if self.size > 2 * self.keep:
                data = b"".join(self.chunks)[-self.keep :]
                self.chunks, self.size = [data], len(data)

    def data(self) -> bytes:
        return b"".join(self.chunks)[-self.keep :]


def run(
    cmd: Sequence[str], *, timeout: float, max_capture: int = MAX_CAPTURE, **kwargs: Any
) -> subprocess.CompletedProcess[Any]:
    """Like `subprocess.run(capture_output=True)`, but bounded and group-aware: the child's
    whole group is stopped on a timeout or an error, not only its leader (raises
    subprocess.TimeoutExpired after stopping it); of each captured stream only the last
    `max_capture` bytes are kept; with `text=True` they are decoded as UTF-8 with bytes that
    are not shown as U+FFFD (a child's odd output is never an exception here).
    """
    text = bool(kwargs.pop("text", False) or kwargs.pop("universal_newlines", False))
    kwargs.pop("encoding", None)
    kwargs.setdefault("stdout", subprocess.PIPE)
    kwargs.setdefault("stderr", subprocess.PIPE)
    proc = spawn(cmd, **kwargs)
    readers = [TailReader(s, max_capture) for s in (proc.stdout, proc.stderr) if s is not None]
    for r in readers:
        r.start()
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        release(proc, grace=2.0)
        _join(readers)
        raise
    except BaseException:
        release(proc, grace=2.0)
        raise
    release(proc, grace=2.0)  # grandchildren left behind by a finished leader
    _join(readers)
    it = iter(readers)
    out: Any = next(it).data() if proc.stdout is not None else None
    err: Any = next(it).data() if proc.stderr is not None else None
    if text:
        out = out.decode("utf-8", "replace").replace("\r\n", "\n") if out is not None else None
        err = err.decode("utf-8", "replace").replace("\r\n", "\n") if err is not None else None
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def _join(readers: Sequence[threading.Thread]) -> None:
    """Wait for the readers (a grandchild that still holds the pipe: not past a few seconds)."""
    for r in readers:
        r.join(timeout=5.0)
        pipe = getattr(r, "pipe", None)
        if not r.is_alive() and pipe is not None:
            with suppress(OSError):
                pipe.close()


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
    reaper.stop(run_id(), grace=grace)  # setsid descendants whose parent is gone: by marker
    _reap(groups)
    for d in dirs:
        _remove(d)
    with _R.lock:
        for pid in groups:
            _R.groups.pop(pid, None)
        for d in dirs:
            with suppress(ValueError):
                _R.tempdirs.remove(d)


def _stop_groups(groups: dict[int, float], grace: float) -> None:
    """SIGTERM, then SIGKILL after `grace`, each group and its recorded descendants."""
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
    if _R.closing:
        finish(EXIT_CODES.get(signum, 128 + signum))
    raise Interrupted(signum)


def closing() -> None:
    """From here on a signal ends the run with its code and one line, without raising (called once
    the error boundary has the exit code: a signal during the interpreter's shutdown has no
    handler to reach, and Python would print its traceback)."""
    _R.closing = True


def install() -> None:
    """Install the handler for SIGINT, SIGTERM and SIGHUP (once, from the main thread)."""
    if _R.installed or threading.current_thread() is not threading.main_thread():
        return
    for sig in SIGNALS:
        if sig == signal.SIGHUP and signal.getsignal(sig) is signal.SIG_IGN:
            continue  # started under nohup: keep ignoring hang-ups
        signal.signal(sig, _handle)
    _R.installed = True
    previous = sys.unraisablehook

    def unraisable(u: Any) -> None:
        # the signal landed where Python cannot raise (a weakref callback during an import): the
        # stop already ran, so end the run here as the error boundary would
        if isinstance(u.exc_value, Interrupted):
            with suppress(OSError, ValueError):
                print(f"pd-doctor: stopped by {u.exc_value}", file=sys.stderr, flush=True)
            finish(u.exc_value.exit_code)
        previous(u)

    sys.unraisablehook = unraisable
    with suppress(OSError):
        reaper.sweep()  # what a SIGKILLed run left in the temp directory


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
