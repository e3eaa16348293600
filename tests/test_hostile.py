"""Hostile and odd input: each case is answered with exit 2 and one clear line, no traceback,
within its time and memory bounds.

Bounds per case: 5 s of CPU (user + sys of pd-doctor and everything it started), 500 MB peak
RSS of the process tree (polled; the tree is killed beyond it), and a wall-clock limit that only
catches hangs (the shared test machine runs at a load of 10 on 2 cores, where a bare
`pd-doctor --version` takes 2 s of wall time).
"""

from __future__ import annotations

import json
import os
import resource
import signal
import socket
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import psutil
import pytest

from vllm_pd_doctor import limits
from vllm_pd_doctor.errors import BadInput

CPU_S = 5.0
MEM_MB = 500
WALL_S = 60.0

BOMB = (
    "\n".join(
        [
            f"{a}: &{a} [" + ",".join(['"lol"'] * 9) + "]"
            if a == "a"
            else f"{a}: &{a} [" + ",".join([f"*{p}"] * 9) + "]"
            for p, a in zip("_abcdefgh", "abcdefghi", strict=True)
        ]
    )
    + "\n"
)
"""The classic billion-laughs YAML (9 levels of 9 aliases: 387 million strings expanded)."""


@dataclass
class Bounded:
    returncode: int
    stdout: str
    stderr: str
    cpu_s: float
    peak_mb: float
    wall_s: float


def run_bounded(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> Bounded:
    """Run `pd-doctor ARGS` as a user would, enforcing the memory and hang bounds."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.monotonic()
        proc = subprocess.Popen(
            [sys.executable, "-m", "vllm_pd_doctor", *args],
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
            env={**os.environ, "COLUMNS": "120", "NO_COLOR": "1", **(env or {})},
            cwd=cwd,
        )
        peak = 0.0
        # The hang bound scales with the machine's load (a shared 2-core box runs 8x slower, not hung).
        wall_limit = WALL_S * max(1.0, os.getloadavg()[0] / (os.cpu_count() or 1))
        try:
            me = psutil.Process(proc.pid)
            while proc.poll() is None:
                rss = 0
                try:
                    for p in [me, *me.children(recursive=True)]:
                        rss += p.memory_info().rss
                except psutil.Error:
                    pass
                peak = max(peak, rss / 2**20)
                if peak > MEM_MB:
                    os.killpg(proc.pid, signal.SIGKILL)
                    pytest.fail(f"{args}: more than {MEM_MB} MB ({peak:.0f} MB)")
                if time.monotonic() - t0 > wall_limit:
                    os.killpg(proc.pid, signal.SIGKILL)
                    pytest.fail(f"{args}: still running after {wall_limit:.0f} s (hangs?)")
                time.sleep(0.02)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        wall = time.monotonic() - t0
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        out.seek(0)
        err.seek(0)
        return Bounded(
            proc.returncode,
            out.read().decode(errors="replace"),
            err.read().decode(errors="replace"),
            (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime),
            peak,
            wall,
        )


def assert_bad_input(res: Bounded, *needles: str) -> None:
    assert res.returncode == 2, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr, res.stderr
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    errors = [ln for ln in lines if ln.startswith("pd-doctor: error:")]
    assert len(errors) == 1, res.stderr
    assert not any(c in res.stderr for c in "╭╰│"), res.stderr  # no usage box
    for n in needles:
        assert n in errors[0], (n, errors[0])
    assert res.cpu_s < CPU_S, f"{res.cpu_s:.1f} s of CPU"


@pytest.fixture(scope="module")
def hostile(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("hostile")
    files: dict[str, Path] = {}
    files["bomb"] = d / "bomb.yaml"
    files["bomb"].write_text(BOMB)
    files["deep"] = d / "deep.yaml"
    files["deep"].write_text("a: " + "[" * 20000 + "]" * 20000 + "\n")
    files["deep_json"] = d / "deep.json"
    files["deep_json"].write_text("[" * 100000 + "]" * 100000)
    files["huge"] = d / "huge.txt"
    with open(files["huge"], "w") as f:
        f.write(("vllm serve m --port 8100 " * 40 + "\n") * 10000)  # ~10 MB
    files["fifo"] = d / "fifo"
    os.mkfifo(files["fifo"])
    files["sock"] = d / "sock"
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(files["sock"]))
    files["zero_link"] = d / "zero.log"
    os.symlink("/dev/zero", files["zero_link"])
    files["utf16_yaml"] = d / "launch.yaml"
    files["utf16_yaml"].write_text("prefill: vllm serve m\ndecode: vllm serve m\n", encoding="utf-16")
    for name, enc in (("utf16_model", "utf-16"), ("latin_model", "latin-1")):
        m = d / name
        m.mkdir()
        (m / "config.json").write_text(
            json.dumps({"layer_types": ["attention", "mamba"], "name": "modèle"}, ensure_ascii=False),
            encoding=enc,
        )
        files[name] = m
    files["bin_model"] = d / "bin_model"
    files["bin_model"].mkdir()
    (files["bin_model"] / "config.json").write_bytes(os.urandom(4096))
    files["dir"] = d
    return files


# --- the library functions themselves ---------------------------------------------------------


def test_alias_bomb_refused_fast() -> None:
    t0 = time.process_time()
    with pytest.raises(BadInput, match=r"YAML nodes|YAML aliases"):
        limits.load_yaml_documents(BOMB, "bomb.yaml")
    assert time.process_time() - t0 < 1.0
    assert len(BOMB.encode()) < 600
    assert limits.load_yaml_documents("a: &x [1, 2]\nb: *x\n", "ok") == [{"a": [1, 2], "b": [1, 2]}]


def test_read_bounded_refuses_specials(hostile: dict[str, Path]) -> None:
    for path, what in (
        (Path("/dev/zero"), "character device"),
        (hostile["fifo"], "FIFO"),
        (hostile["sock"], "socket"),
        (hostile["dir"], "directory"),
        (hostile["zero_link"], "character device"),
        (hostile["dir"] / "missing", "no such file"),
    ):
        t0 = time.monotonic()
        with pytest.raises(BadInput, match=what):
            limits.read_bounded(path, 1000, f"--log {path}")
        assert time.monotonic() - t0 < 1.0
    data, size = limits.read_bounded(hostile["huge"], 1000, "x", truncate=True)
    assert len(data) == 1000 and size > 10**6
    with pytest.raises(BadInput, match="MB"):
        limits.read_bounded(hostile["huge"], 1000, "x")


@pytest.mark.parametrize("value", [float("nan"), float("inf"), float("-inf")])
def test_finite_refuses_nan_and_inf(value: float) -> None:
    with pytest.raises(BadInput, match="finite"):
        limits.finite(value, "--timeout")
    assert limits.finite(3.0, "--timeout", 0, 10) == 3.0
    with pytest.raises(BadInput):
        limits.finite(11, "--timeout", 0, 10)


# --- through the command line -------------------------------------------------------------------

CASES: list[tuple[str, list[str], tuple[str, ...]]] = [
    ("bomb check-config", ["check-config", "--config", "{bomb}"], ("alias", "YAML")),
    ("bomb report", ["report", "--no-repro", "--config", "{bomb}", "-o", "{out}"], ("YAML",)),
    ("deep yaml", ["check-config", "--config", "{deep}"], ("--config",)),
    ("deep json", ["check-config", "--config", "{deep_json}"], ("--config",)),
    ("huge config", ["check-config", "--config", "{huge}"], ("MB",)),
    ("huge config report", ["report", "--no-repro", "--config", "{huge}", "-o", "{out}"], ("MB",)),
    ("config /dev/zero", ["check-config", "--config", "/dev/zero"], ("character device",)),
    ("config fifo", ["check-config", "--config", "{fifo}"], ("FIFO",)),
    ("config utf16", ["check-config", "--config", "{utf16_yaml}"], ("UTF",)),
    ("log /dev/zero", ["report", "--no-repro", "--log", "/dev/zero", "-o", "{out}"], ("device",)),
    ("log fifo", ["report", "--no-repro", "--log", "{fifo}", "-o", "{out}"], ("FIFO",)),
    ("log socket", ["report", "--no-repro", "--log", "{sock}", "-o", "{out}"], ("socket",)),
    ("log dir", ["report", "--no-repro", "--log", "{dir}", "-o", "{out}"], ("directory",)),
    ("log missing", ["report", "--no-repro", "--log", "{dir}/nope.log", "-o", "{out}"], ("no such",)),
    ("log symlink to device", ["report", "--no-repro", "--log", "{zero_link}", "-o", "{out}"], ("device",)),
    ("repro timeout nan", ["repro", "--timeout", "nan"], ("--timeout", "finite")),
    ("repro timeout inf", ["repro", "--timeout", "inf"], ("--timeout", "finite")),
    ("repro timeout 1e309", ["repro", "--timeout", "1e309"], ("--timeout",)),
    ("repro timeout negative", ["repro", "--timeout", "-5"], ("--timeout",)),
    ("report timeout nan", ["report", "--no-repro", "--timeout", "nan", "-o", "{out}"], ("--timeout",)),
    ("redact-extra bad", ["report", "--no-repro", "--redact-extra", "(", "-o", "{out}"], ("regular",)),
    ("redact-extra empty", ["report", "--no-repro", "--redact-extra", ".*", "-o", "{out}"], ("empty",)),
    ("matrix timeout inf", ["matrix", "--vllm", "0.28.0", "--timeout", "inf"], ("--timeout",)),
    ("repro model utf16", ["repro", "--model", "{utf16_model}"], ("UTF-16",)),
    ("repro model latin1", ["repro", "--model", "{latin_model}"], ("UTF-8",)),
    ("repro model binary", ["repro", "--model", "{bin_model}"], ("--model",)),
    ("prompt-len abc", ["repro", "--prompt-len", "abc"], ("--prompt-len",)),
    ("format xml", ["check-config", "--format", "xml"], ("--format",)),
    ("unknown option", ["report", "--bogus"], ("--bogus",)),
    ("unknown command", ["bogus"], ("bogus",)),
    ("missing value", ["repro", "--timeout"], ("--timeout",)),
    ("check-config nothing", ["check-config"], ("nothing to check",)),
    ("python /dev/zero", ["repro", "--python", "/dev/zero"], ("--python",)),
    ("python fifo", ["repro", "--python", "{fifo}"], ("--python",)),
    ("python dir", ["check-config", "--python", "{dir}", "--prefill-cmd", "vllm serve m"], ("--python",)),
    ("envs rm traversal", ["envs", "rm", "../x"], ("no environment",)),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_hostile_cli_case(
    case: tuple[str, list[str], tuple[str, ...]], hostile: dict[str, Path], tmp_path: Path
) -> None:
    _name, args, needles = case
    fmt = {k: str(v) for k, v in hostile.items()} | {"out": str(tmp_path / "bundle")}
    res = run_bounded(
        *(a.format(**fmt) for a in args), cwd=tmp_path, env={"PD_DOCTOR_HOME": str(tmp_path / "home")}
    )
    assert_bad_input(res, *needles)
    assert not (tmp_path / "bundle").exists()


def test_report_output_symlinks_and_existing_files(tmp_path: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    link = tmp_path / "out.zip"
    os.symlink(victim, link)
    assert_bad_input(run_bounded("report", "--no-repro", "-o", str(link), cwd=tmp_path), "symlink")
    os.symlink(victim, tmp_path / "b.zip.part")
    assert_bad_input(
        run_bounded("report", "--no-repro", "-o", str(tmp_path / "b.zip"), cwd=tmp_path), "symlink"
    )
    existing = tmp_path / "old.zip"
    existing.write_bytes(b"PK old")
    assert_bad_input(run_bounded("report", "--no-repro", "-o", str(existing), cwd=tmp_path), "exists")
    assert victim.read_text() == "keep me" and existing.read_bytes() == b"PK old"
    # --force replaces an existing FILE.zip (atomically), still never through a link
    res = run_bounded("report", "--no-repro", "-q", "--force", "-o", str(existing), cwd=tmp_path)
    assert res.returncode in (0, 1), res.stderr
    assert zipfile.is_zipfile(existing) and "report.md" in zipfile.ZipFile(existing).namelist()
    assert_bad_input(run_bounded("report", "--no-repro", "--force", "-o", str(link), cwd=tmp_path), "symlink")
    assert victim.read_text() == "keep me"
    assert not [p.name for p in tmp_path.iterdir() if ".part" in p.name and p.name != "b.zip.part"]


def test_envs_rm_symlinked_env_leaves_no_lock(tmp_path: Path) -> None:
    home = tmp_path / "home"
    (home / "envs").mkdir(parents=True)
    real = tmp_path / "real-env"
    (real / "bin").mkdir(parents=True)
    os.symlink(real, home / "envs" / "vllm-cpu-9.9.9")
    res = run_bounded("envs", "rm", "vllm-cpu-9.9.9", env={"PD_DOCTOR_HOME": str(home)})
    assert res.returncode == 0, res.stderr
    assert "Traceback" not in res.stderr
    assert list((home / "envs").iterdir()) == []
    assert (real / "bin").is_dir()  # the link went, not what it pointed at


@pytest.mark.slow
def test_sparse_huge_log_is_read_within_bounds(tmp_path: Path) -> None:
    big = tmp_path / "huge.log"
    with open(big, "wb") as f:
        f.write(b"ERROR boom\n")
        f.truncate(2 * 1024**3)  # 2 GB, sparse
    res = run_bounded(
        "report", "--no-repro", "-q", "--log", str(big), "-o", str(tmp_path / "b.zip"), cwd=tmp_path
    )
    assert res.returncode in (0, 1), res.stderr
    assert "Traceback" not in res.stderr
    assert res.peak_mb < MEM_MB
