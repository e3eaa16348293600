"""What pd-doctor started, found and stopped even when pd-doctor itself is killed (stdlib only).

Three mechanisms, each for what the one before cannot reach:

- A marker: every child gets `PD_DOCTOR_OWNER=<run>.<n>` in its environment and its
  descendants inherit it, so a grandchild that left the process group with `setsid` (and
  whose parent exited, so it is no longer in the process tree) is still found by scanning
  `/proc/*/environ` (about 2 ms for a hundred processes). `procs` stops these with the group.
- A watchdog: a tiny stdlib process (this file, run with `python -S -I`), started with the
  first child. pd-doctor tells it on a pipe which process groups and temporary directories
  it holds; when the pipe closes (pd-doctor exited, or was SIGKILLed and could run nothing)
  it TERMs, then KILLs, what is still registered and every process that carries the run's
  marker, and removes the registered directories. Nothing is orphaned for more than the
  grace (uv, vLLM engines, their workers).
- Names: temporary directories are `pd-doctor-<pid>-*`; a later run removes those whose
  process is gone (when even the watchdog was killed, e.g. by the OOM killer).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from typing import IO

MARKER_VAR = "PD_DOCTOR_OWNER"
TEMP_PREFIX = "pd-doctor-"
_STALE_RE = re.compile(r"pd-doctor-([0-9]+)-")
GRACE_S = 3.0


def marked(tag: str, *, exact: bool = False) -> list[int]:
    """PIDs (not this one) whose environment has PD_DOCTOR_OWNER=`tag` (or `tag`.*)."""
    needle = f"{MARKER_VAR}={tag}".encode()
    me = os.getpid()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    for entry in entries:
        if not entry.isdigit() or int(entry) == me:
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as fh:
                data = fh.read(1 << 20)
        except OSError:
            continue
        for item in data.split(b"\0"):
            if item == needle or (not exact and item.startswith(needle + b".")):
                found.append(int(entry))
                break
    return found


def _signal(pid: int, sig: int, group: bool = False) -> None:
    try:
        (os.killpg if group else os.kill)(pid, sig)
    except (ProcessLookupError, PermissionError):
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def stop(tag: str, groups: tuple[int, ...] = (), *, exact: bool = False, grace: float = GRACE_S) -> int:
    """TERM the `groups` and every process marked `tag`, KILL what is left after `grace`.
    Returns how many marked processes there were."""
    pids = marked(tag, exact=exact)
    if not pids and not any(_group_alive(g) for g in groups):
        return 0
    for g in groups:
        _signal(g, signal.SIGTERM, group=True)
    for p in pids:
        _signal(p, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        left = marked(tag, exact=exact)
        if not left and not any(_group_alive(g) for g in groups):
            return len(pids)
        time.sleep(0.05)
    for g in groups:
        _signal(g, signal.SIGKILL, group=True)
    for p in marked(tag, exact=exact):
        _signal(p, signal.SIGKILL)
    return len(pids)


def remove_path(path: str) -> None:
    """Remove a temporary directory or file; never follows a link."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path, ignore_errors=True)
        else:
            os.unlink(path)
    except OSError:
        pass


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is gone for our purpose
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[-1].split()[0] != b"Z"
    except (OSError, IndexError):
        return True


def sweep(directory: str | None = None, prefix: str = TEMP_PREFIX) -> list[str]:
    """Remove `<prefix><pid>-*` entries (ours, not links) whose process is gone: in the temp
    directory `pd-doctor-<pid>-*`, next to an output `.<name>.part-<pid>-*`."""
    base = directory or tempfile.gettempdir()
    stale = _STALE_RE if prefix == TEMP_PREFIX else re.compile(re.escape(prefix) + "([0-9]+)-")
    removed = []
    try:
        entries = os.listdir(base)
    except OSError:
        return []
    uid = os.getuid()
    for name in entries:
        m = stale.match(name)
        if m is None or int(m.group(1)) == os.getpid() or pid_alive(int(m.group(1))):
            continue
        path = os.path.join(base, name)
        try:
            st = os.lstat(path)
        except OSError:
            continue
        if st.st_uid != uid or os.path.islink(path):
            continue
        remove_path(path)
        removed.append(path)
    return removed


# --- the watchdog ---------------------------------------------------------------------------------


class Watchdog:
    """The parent's side: start the watchdog once, tell it what to clean up."""

    def __init__(self, run: str) -> None:
        self.run = run
        self.pipe: IO[bytes] | None = None

    def start(self) -> None:
        if self.pipe is not None:
            return
        proc = subprocess.Popen(
            [sys.executable, "-S", "-I", os.path.abspath(__file__), self.run],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            close_fds=True,
            env={k: v for k, v in os.environ.items() if k != MARKER_VAR},
        )
        self.pid = proc.pid
        self.pipe = proc.stdin
        proc.returncode = 0  # never waited for: it outlives us by design (no ResourceWarning)

    def send(self, op: str, arg: object) -> None:
        if self.pipe is None:
            return
        try:
            self.pipe.write(f"{op} {arg}\n".encode("utf-8", "surrogateescape"))
            self.pipe.flush()
        except (OSError, ValueError):
            self.pipe = None


def watch(run: str, stream: IO[bytes]) -> None:
    """The watchdog's side: read what to clean up until the pipe closes, then clean it up."""
    for sig in (signal.SIGINT, signal.SIGHUP, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)  # stopped only by its pipe closing (or KILL)
    groups: set[int] = set()
    paths: list[str] = []
    for raw in stream:
        op, _, arg = raw.rstrip(b"\n").decode("utf-8", "surrogateescape").partition(" ")
        if op == "g":
            groups.add(int(arg))
        elif op == "u":
            groups.discard(int(arg))
        elif op == "d":
            paths.append(arg)
        elif op == "r" and arg in paths:
            paths.remove(arg)
    stop(run, tuple(groups))
    for path in paths:
        remove_path(path)


if __name__ == "__main__":
    watch(sys.argv[1], sys.stdin.buffer)
