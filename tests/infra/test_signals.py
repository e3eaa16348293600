"""One signal policy: SIGINT, SIGTERM and SIGHUP stop everything pd-doctor started.

Each case records pd-doctor's descendants (psutil) at a chosen moment, sends the signal, and
asserts the exit code (130 / 143 / 129), that none of the recorded processes is left (children of
children and those that called setsid included) and that no `pd-doctor-*` temp dir is left
(pd-doctor runs with TMPDIR pointing at the test's own directory).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from vllm_pd_doctor.infra import procs

CODES = {signal.SIGINT: 130, signal.SIGTERM: 143, signal.SIGHUP: 129}
ROOT = Path(__file__).resolve().parents[2]


def _default_dispositions() -> None:
    """In the child before exec: SIGINT/SIGTERM/SIGHUP at their defaults. The tests assume a process
    that can be interrupted; under `nohup` (SIGHUP ignored) or a shell's `&` (SIGINT ignored) the child
    would inherit SIG_IGN, which pd-doctor rightly keeps, so the test sets the disposition itself."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_DFL)


def _descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.Error:
        return []


def _cmdlines(ps: list[psutil.Process]) -> list[str]:
    out = []
    for p in ps:
        try:
            out.append(" ".join(p.cmdline()))
        except psutil.Error:
            pass
    return out


def _left(recorded: list[psutil.Process], timeout: float = 15.0) -> list[str]:
    deadline = time.monotonic() + timeout
    alive = recorded
    while time.monotonic() < deadline:
        alive = [p for p in recorded if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]
        if not alive:
            return []
        time.sleep(0.1)
    return _cmdlines(alive)


def _interrupt(
    args: list[str], sig: int, ready: Callable[[list[str]], bool], tmp: Path, *, timeout: float = 300.0
) -> tuple[int, str, list[psutil.Process]]:
    """Start `pd-doctor ARGS`, wait until `ready(descendant cmdlines)`, send `sig`."""
    tmpdir = tmp / "tmp"
    tmpdir.mkdir(exist_ok=True)
    env = {**os.environ, "TMPDIR": str(tmpdir), "COLUMNS": "120", "NO_COLOR": "1"}
    err_path = tmp / "stderr.txt"
    with open(err_path, "wb") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vllm_pd_doctor", *args],
            stdout=subprocess.DEVNULL,
            stderr=err,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=tmp,
            start_new_session=True,
            preexec_fn=_default_dispositions,
        )
        try:
            deadline = time.monotonic() + timeout
            recorded: list[psutil.Process] = []
            seen = False
            while time.monotonic() < deadline and proc.poll() is None:
                recorded = _descendants(proc.pid)
                if ready(_cmdlines(recorded)):
                    seen = True
                    break
                time.sleep(0.05)
            assert seen and proc.poll() is None, "pd-doctor finished before the moment came"
            recorded = list({p.pid: p for p in [*recorded, *_descendants(proc.pid)]}.values())
            os.kill(proc.pid, sig)
            rc = proc.wait(timeout=60)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return rc, err_path.read_text(errors="replace"), recorded


def _assert_clean(rc: int, sig: int, stderr: str, recorded: list[psutil.Process], tmp: Path) -> None:
    assert rc == CODES[sig], (rc, stderr[-3000:])
    assert "Traceback" not in stderr, stderr
    left = _left(recorded)
    assert left == [], left
    leftovers = sorted(p.name for p in (tmp / "tmp").glob("pd-doctor-*"))
    assert leftovers == [], leftovers


# --- the policy itself, without vLLM -------------------------------------------------------------

_SCRIPT = textwrap.dedent("""
    import os, sys, time, tempfile
    from vllm_pd_doctor.infra import procs
    procs.install()
    try:
        # a child with a grandchild in its group and one that left it with setsid
        p = procs.spawn(["sh", "-c", "sleep 300 & setsid sleep 300 & wait"])
        with procs.tempdir("pd-doctor-test-") as d:
            print(p.pid, d, flush=True)
            time.sleep(300)
    except procs.Interrupted as exc:
        procs.finish(exc.exit_code)
""")


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT], ids=["TERM", "HUP", "INT"])
def test_policy_stops_groups_setsid_children_and_temp_dirs(sig: int, tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _SCRIPT],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "TMPDIR": str(tmp_path)},
        cwd=ROOT,
        preexec_fn=_default_dispositions,
    )
    assert proc.stdout is not None
    line = proc.stdout.readline().split()
    tmpdir = Path(line[1])
    deadline = time.monotonic() + 20
    while len(_descendants(proc.pid)) < 3 and time.monotonic() < deadline:
        time.sleep(0.05)  # sh, sleep, setsid sleep
    recorded = _descendants(proc.pid)
    assert len(recorded) >= 3, _cmdlines(recorded)
    assert tmpdir.is_dir()
    os.kill(proc.pid, sig)
    assert proc.wait(timeout=30) == CODES[sig]
    assert _left(recorded) == []
    assert not tmpdir.exists()


def test_spawn_registers_and_release_forgets() -> None:
    p = procs.spawn(["sleep", "30"])
    try:
        assert p.pid in procs.registered()[0]
    finally:
        procs.release(p, grace=1.0)
    assert p.pid not in procs.registered()[0]
    assert p.poll() is not None


def test_run_stops_the_whole_group_on_timeout() -> None:
    t0 = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired):
        procs.run(["sh", "-c", "sleep 300 & sleep 300"], timeout=1.0)
    assert time.monotonic() - t0 < 20
    assert procs.registered()[0] == ()


def test_a_signal_while_starting_is_held_until_registered() -> None:
    """The handler, entered while the main thread is inside spawn(), defers to its end."""
    seen: list[int] = []
    with procs._starting():
        procs._handle(signal.SIGTERM, None)  # what a signal arriving here would do
        seen.append(procs._R.pending or 0)
        procs._R.pending = None  # (not re-raised in this test process)
    assert seen == [signal.SIGTERM]


def test_a_signal_python_cannot_raise_still_ends_the_run() -> None:
    """A signal whose Interrupted lands in a weakref callback (seen in CI: inside an import's module
    lock callback) is "ignored" by Python: the unraisable hook ends the run with the signal's code,
    one line, no traceback."""
    code = (
        "import signal, weakref\n"
        "from vllm_pd_doctor.infra import procs\n"
        "procs.install()\n"
        "class A: pass\n"
        "a = A()\n"
        "def cb(_):\n"
        "    procs._R.stopping = signal.SIGINT\n"
        "    raise procs.Interrupted(signal.SIGINT)\n"
        "r = weakref.ref(a, cb)\n"
        "del a\n"
        "print('not reached')\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 130, proc.stderr
    assert "not reached" not in proc.stdout
    assert "Traceback" not in proc.stderr and "stopped by SIGINT" in proc.stderr


# --- the real commands ----------------------------------------------------------------------------


def _harness_running(cmds: list[str]) -> bool:
    return any("vllm_pd_doctor_target" in c for c in cmds)


def _anything_running(cmds: list[str]) -> bool:
    return bool(cmds)


@pytest.mark.vllm
@pytest.mark.parametrize(
    ("sig", "moment"),
    [
        (signal.SIGTERM, "harness"),
        (signal.SIGHUP, "harness"),
        (signal.SIGINT, "harness"),
        (signal.SIGTERM, "probe"),
    ],
    ids=["TERM-harness", "HUP-harness", "INT-harness", "TERM-probe"],
)
def test_repro_interrupted(python_buggy: str, sig: int, moment: str, tmp_path: Path) -> None:
    ready = _harness_running if moment == "harness" else _anything_running
    rc, err, recorded = _interrupt(["repro", "--python", python_buggy], sig, ready, tmp_path)
    _assert_clean(rc, sig, err, recorded, tmp_path)


def _collect_env_running(cmds: list[str]) -> bool:
    return any("collect_env" in c for c in cmds)


@pytest.mark.vllm
@pytest.mark.parametrize(
    ("sig", "moment"),
    [
        (signal.SIGTERM, "collect_env"),
        (signal.SIGHUP, "collect_env"),
        (signal.SIGINT, "collect_env"),
        (signal.SIGTERM, "harness"),
    ],
    ids=["TERM-collect_env", "HUP-collect_env", "INT-collect_env", "TERM-harness"],
)
def test_report_interrupted(python_buggy: str, sig: int, moment: str, tmp_path: Path) -> None:
    ready = _collect_env_running if moment == "collect_env" else _harness_running
    rc, err, recorded = _interrupt(
        [
            "report",
            "--python",
            python_buggy,
            "--prefill-cmd",
            "vllm serve m --port 8100",
            "-o",
            str(tmp_path / "bundle"),
        ],
        sig,
        ready,
        tmp_path,
    )
    _assert_clean(rc, sig, err, recorded, tmp_path)
    assert not (tmp_path / "bundle").exists()


def test_worker_threads_can_start_children_and_temp_dirs() -> None:
    """matrix runs repros in worker threads: tempdir() and run() there must not self-deadlock on
    the registry lock (they did once: `matrix --jobs 2` hung forever)."""
    import threading

    from vllm_pd_doctor.infra import procs

    done: list[str] = []

    def work() -> None:
        with procs.tempdir("pd-doctor-test-") as d:
            out = procs.run([sys.executable, "-c", "print('ok')"], timeout=30, text=True)
            done.append(out.stdout.strip() + ":" + str(os.path.isdir(d)))

    threads = [threading.Thread(target=work, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert not any(t.is_alive() for t in threads), "a worker thread is stuck in procs"
    assert done == ["ok:True", "ok:True"]
    assert procs.registered() == ((), ())


def test_a_signal_after_the_boundary_ends_the_run_without_a_traceback() -> None:
    """Once main has its exit code (`procs.closing()`), a signal, e.g. during the interpreter's
    shutdown where no handler could catch an exception, ends the run with its code and one line."""
    code = (
        "import os, signal, time\n"
        "from vllm_pd_doctor.infra import procs\n"
        "procs.install()\n"
        "procs.closing()\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "time.sleep(5)\n"
        "raise SystemExit(0)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 130, proc.stderr
    assert "Traceback" not in proc.stderr and "SIGINT received" in proc.stderr
