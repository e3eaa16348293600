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

from vllm_pd_doctor.infra import limits
from vllm_pd_doctor.infra.errors import BadInput

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


def test_report_on_a_16mb_log_costs_bounded_cpu(tmp_path: Path) -> None:
    """Triage reads the whole log; the bundle redacts only what it includes (excerpts within a
    budget), so a 16 MB log full of host names, addresses and tracebacks stays within the CPU
    bound (redacting it whole cost about 16 s)."""
    big = tmp_path / "big.log"
    lines = [
        f"INFO 11-20 10:00:{i % 60:02d} [nixl_connector.py:{i}] handshake with node-{i}.cluster.local "
        f"10.0.{i % 250}.{i % 199}:5600 done, /home/alice/m/{i:x}\n"
        for i in range(2000)
    ]
    crash = 'Traceback (most recent call last):\n  File "x.py", line 1, in f\nAssertionError\n'
    block = "".join(lines) + crash
    with open(big, "w") as f:
        for _ in range(16 * 1024 * 1024 // len(block)):
            f.write(block)
    assert big.stat().st_size > 15 * 1024 * 1024
    res = run_bounded(
        "report", "--no-repro", "-q", "--log", str(big), "-o", str(tmp_path / "b.zip"), cwd=tmp_path
    )
    assert res.returncode in (0, 1), res.stderr
    assert "Traceback" not in res.stderr
    assert res.cpu_s < CPU_S, f"{res.cpu_s:.1f} s of CPU"
    assert res.peak_mb < MEM_MB


# --- round 2 (issue 21): hostile input answered with exit 2/3 and one line, never 4 ------------

BIG_INT = "9" * 5000
"""More digits than Python converts (sys.get_int_max_str_digits() is 4300)."""

FAKE_PYTHON = r'''#!/usr/bin/env python3
"""A stand-in for a vLLM interpreter that misbehaves (how: FAKE_MODE)."""
import json, os, sys
mode = os.environ.get("FAKE_MODE", "")
if len(sys.argv) > 1 and sys.argv[1] == "-c":  # pd-doctor's probe
    if mode == "probe-nonutf8":
        sys.stdout.buffer.write(b'\xff\xfe{"python": "3.11"}\n\xff')
    elif mode == "probe-deep":
        print("[" * 200000 + "]" * 200000)
    elif mode == "probe-bigint":
        print('{"python": ' + "9" * 5000 + "}")
    elif mode == "probe-flood":
        chunk = b"a" * (1 << 20)
        for _ in range(400):
            sys.stdout.buffer.write(chunk)
        print()
        print(json.dumps({"python": "3.11", "vllm": None, "vllm_path": None, "found": False}))
    else:
        here = os.path.dirname(os.path.abspath(__file__))
        print(json.dumps({"python": "3.11.0", "vllm": "0.28.0", "vllm_path": here, "found": True}))
    sys.exit(0)
out = sys.argv[sys.argv.index("--out") + 1]  # the harness: a hostile answer
if mode == "answer-nonutf8":
    open(out, "wb").write(b'{"results": "\xff\xfe"}')
elif mode == "answer-deep":
    open(out, "w").write("[" * 200000 + "]" * 200000)
elif mode == "answer-bigint":
    open(out, "w").write('{"timings": ' + "9" * 5000 + "}")
elif mode == "answer-list":
    open(out, "w").write("[1, 2]")
elif mode == "answer-noresults":
    open(out, "w").write('{"results": []}')
elif mode == "answer-flood":  # 400 MB on stdout, no answer
    chunk = b"x" * (1 << 20) + b"\n"
    for _ in range(400):
        sys.stdout.buffer.write(chunk)
'''


@pytest.fixture(scope="module")
def fake_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    p = tmp_path_factory.mktemp("fakepy") / "python"
    p.write_text(FAKE_PYTHON)
    p.chmod(0o755)
    return p


def assert_one_line(res: Bounded, *codes: int, needle: str = "") -> None:
    """Exit with one of `codes` (2 or 3), one `pd-doctor: error:` line, no traceback, bounded."""
    assert res.returncode in codes, (res.returncode, res.stderr[-2000:])
    assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr[-2000:]
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("pd-doctor: error:")]
    assert len(errors) == 1, res.stderr[-2000:]
    assert needle in errors[0], (needle, errors[0])
    assert res.cpu_s < CPU_S, f"{res.cpu_s:.1f} s of CPU"


R2_CASES: list[tuple[str, list[str], dict[str, str], int, str]] = [
    # name, args, env, exit code, needle in the error line
    ("bigint flag", ["repro", "--prompt-len", BIG_INT], {}, 2, "--prompt-len"),
    ("bigint json config", ["check-config", "--config", "{bigint_json}"], {}, 2, "integer"),
    ("bigint yaml config", ["check-config", "--config", "{bigint_yaml}"], {}, 2, ""),
    ("home /dev/null", ["envs", "list"], {"PD_DOCTOR_HOME": "/dev/null"}, 2, "PD_DOCTOR_HOME"),
    ("home /proc", ["envs", "list"], {"PD_DOCTOR_HOME": "/proc"}, 2, "PD_DOCTOR_HOME"),
    ("home ~nosuchuser", ["envs", "list"], {"PD_DOCTOR_HOME": "~nosuchuser-pd"}, 2, "no such user"),
    ("HOME empty", ["envs", "list"], {"HOME": "", "PD_DOCTOR_HOME": "", "XDG_CACHE_HOME": ""}, 2, "HOME"),
    ("long -o", ["report", "--no-repro", "-o", "{dir}/" + "a" * 300 + ".zip"], {}, 2, "bytes"),
    ("longer -o", ["report", "--no-repro", "-o", "{dir}/" + "a/" * 2100 + "r.zip"], {}, 2, "longer"),
    ("-o .", ["report", "--no-repro", "-o", "."], {}, 2, "output '.'"),
    ("-o -", ["report", "--no-repro", "-o", "-"], {}, 2, "not to stdout"),
    ("version newline", ["repro", "--vllm", "99.0.0\n"], {}, 2, "release version"),
    ("version unicode digits", ["repro", "--vllm", "0.\uff12\uff18.0"], {}, 2, "release version"),
    ("version arabic digits", ["repro", "--vllm", "0.\u0662\u0668.0"], {}, 2, "release version"),
    ("python non-utf8", ["repro", "--python", "{fake}"], {"FAKE_MODE": "probe-nonutf8"}, 2, "--python"),
    ("python deep json", ["repro", "--python", "{fake}"], {"FAKE_MODE": "probe-deep"}, 2, "--python"),
    (
        "answer no results",
        ["repro", "--python", "{fake}"],
        {"FAKE_MODE": "answer-noresults"},
        3,
        "no results",
    ),
    ("python bigint", ["repro", "--python", "{fake}"], {"FAKE_MODE": "probe-bigint"}, 2, "--python"),
    ("python 400 MB", ["repro", "--python", "{fake}"], {"FAKE_MODE": "probe-flood"}, 3, "no vLLM"),
    ("answer non-utf8", ["repro", "--python", "{fake}"], {"FAKE_MODE": "answer-nonutf8"}, 3, "unreadable"),
    ("answer deep", ["repro", "--python", "{fake}"], {"FAKE_MODE": "answer-deep"}, 3, "nested too deeply"),
    ("answer bigint", ["repro", "--python", "{fake}"], {"FAKE_MODE": "answer-bigint"}, 3, "unreadable"),
    ("answer list", ["repro", "--python", "{fake}"], {"FAKE_MODE": "answer-list"}, 3, "not a JSON object"),
    (
        "answer 400 MB log",
        ["repro", "--python", "{fake}"],
        {"FAKE_MODE": "answer-flood"},
        3,
        "without an answer",
    ),
]


@pytest.mark.parametrize("case", R2_CASES, ids=[c[0] for c in R2_CASES])
def test_hostile_round2_cli_case(
    case: tuple[str, list[str], dict[str, str], int, str], fake_python: Path, tmp_path: Path
) -> None:
    _name, args, env, code, needle = case
    (tmp_path / "big.json").write_text('{"block_size": ' + BIG_INT + "}")
    (tmp_path / "big.yaml").write_text("prefill:\n  block_size: " + BIG_INT + "\n")
    fmt = {
        "bigint_json": str(tmp_path / "big.json"),
        "bigint_yaml": str(tmp_path / "big.yaml"),
        "fake": str(fake_python),
        "dir": str(tmp_path),
    }
    env = {"PD_DOCTOR_HOME": str(tmp_path / "home"), **env}  # "" for the HOME case: unset
    res = run_bounded(*(a.format(**fmt) for a in args), cwd=tmp_path, env=env)
    assert_one_line(res, code, needle=needle)
    assert res.peak_mb < 200, f"{res.peak_mb:.0f} MB"
    assert not (tmp_path / "-").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".") and ".part" in p.name]


def test_stdout_closed_or_full_is_exit_3(tmp_path: Path) -> None:
    for redirect, needle in ((">&-", "stdout"), (">/dev/full", "No space")):
        for args in ("--version", "check-config --prefill-cmd 'vllm serve m'"):
            proc = subprocess.run(
                f"exec {sys.executable} -m vllm_pd_doctor {args} {redirect}",
                shell=True,
                capture_output=True,
                text=True,
                timeout=WALL_S,
                env={**os.environ, "PD_DOCTOR_HOME": str(tmp_path)},
            )
            assert proc.returncode == 3, (redirect, args, proc.returncode, proc.stderr)
            assert "Traceback" not in proc.stderr and "Exception ignored" not in proc.stderr, proc.stderr
            errors = [ln for ln in proc.stderr.splitlines() if ln.startswith("pd-doctor: error:")]
            assert len(errors) == 1 and needle in errors[0], proc.stderr


def test_odd_terminal_settings_still_run(tmp_path: Path) -> None:
    """COLUMNS=abc and an ASCII-only stdout are no errors: the output is written, escaped."""
    for env in ({"COLUMNS": "abc"}, {"PYTHONIOENCODING": "ascii"}, {"COLUMNS": "-5", "LANG": "C"}):
        res = run_bounded(
            "check-config",
            "--prefill-cmd",
            "vllm serve m\u00f6del-\u2603",
            env={**env, "PD_DOCTOR_HOME": str(tmp_path)},
        )
        assert res.returncode in (0, 1), (env, res.stderr[-2000:])
        assert "Traceback" not in res.stderr and "internal error" not in res.stderr, res.stderr


ESC_MODEL = "m\x1b]0;pwned\x07\x1b[2J\u202egpj.exe"


def test_escape_sequences_never_reach_the_terminal_or_markdown(tmp_path: Path) -> None:
    cfg = tmp_path / "launch.sh"
    kv = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
    cfg.write_text(f"vllm serve '{ESC_MODEL}' --port 8100 --kv-transfer-config '{kv}'\n")
    for fmt in ("table", "json", "markdown"):
        res = run_bounded(
            "check-config", "--config", str(cfg), "-f", fmt, env={"PD_DOCTOR_HOME": str(tmp_path)}
        )
        assert res.returncode in (0, 1, 2), res.stderr[-2000:]
        for stream in (res.stdout, res.stderr):
            assert "\x1b" not in stream and "\x07" not in stream and "\u202e" not in stream, (
                fmt,
                stream[-500:],
            )
    res = run_bounded(
        "report",
        "--no-repro",
        "-q",
        "--config",
        str(cfg),
        "-o",
        str(tmp_path / "b.zip"),
        cwd=tmp_path,
        env={"PD_DOCTOR_HOME": str(tmp_path)},
    )
    assert res.returncode in (0, 1), res.stderr[-2000:]
    with zipfile.ZipFile(tmp_path / "b.zip") as z:
        for name in z.namelist():
            if name.endswith(".md"):
                md = z.read(name).decode()
                assert "\x1b" not in md and "\x07" not in md and "\u202e" not in md, name


def _mount_home(mode: str, home: Path) -> list[str] | None:
    """A command prefix running in a private mount namespace with `home` a tiny tmpfs (read
    only, or full); None where this machine cannot (no unshare, no permission)."""
    import shutil as _sh

    if _sh.which("unshare") is None:
        return None
    probe = subprocess.run(["unshare", "-rm", "true"], capture_output=True)
    if probe.returncode != 0:
        probe = subprocess.run(["unshare", "-m", "true"], capture_output=True)
        if probe.returncode != 0:
            return None
        flag = "-m"
    else:
        flag = "-rm" if os.getuid() != 0 else "-m"
    home.mkdir(parents=True, exist_ok=True)
    setup = (
        f"mount -t tmpfs -o size=256k,ro none {home}"
        if mode == "ro"
        else f"mount -t tmpfs -o size=256k none {home} && mkdir -p {home}/.cache && "
        f"(head -c 1000000 /dev/zero > {home}/.cache/fill 2>/dev/null; true)"
    )
    return ["unshare", flag, "sh", "-c", f'{setup} && exec "$@"', "sh"]


@pytest.mark.parametrize("mode", ["ro", "full"])
def test_read_only_or_full_home_is_one_line(mode: str, tmp_path: Path) -> None:
    home = tmp_path / "home"
    prefix = _mount_home(mode, home)
    if prefix is None:
        pytest.skip("no private mount namespace here (unshare/mount not permitted)")
    env = {k: v for k, v in os.environ.items() if k not in ("PD_DOCTOR_HOME", "XDG_CACHE_HOME")}
    env |= {"HOME": str(home), "COLUMNS": "120", "NO_COLOR": "1"}
    for args, codes in (
        (["repro", "--vllm", "0.28.0", "-q"], (3,)),
        (["report", "--no-repro", "-q", "-o", f"{home}/r.zip"], (2, 3)),
        (["check-config", "--prefill-cmd", "vllm serve m"], (0, 1)),
    ):
        proc = subprocess.run(
            [*prefix, sys.executable, "-m", "vllm_pd_doctor", *args],
            capture_output=True,
            text=True,
            timeout=WALL_S,
            env=env,
        )
        assert proc.returncode in codes, (mode, args, proc.returncode, proc.stderr[-1500:])
        assert "Traceback" not in proc.stderr and "internal error" not in proc.stderr, proc.stderr
        if codes != (0, 1):
            assert len([ln for ln in proc.stderr.splitlines() if ln.startswith("pd-doctor: error:")]) == 1


def test_ctrl_c_in_the_first_moments_is_no_traceback(tmp_path: Path) -> None:
    """The console script installs a signal policy before its imports: a Ctrl-C while typer and
    the commands load ends with one line and 130 (before Python's own handler exists, the
    default action ends it with -2: also no traceback)."""
    script = Path(sys.executable).parent / "pd-doctor"
    if not script.exists():
        pytest.skip("pd-doctor console script not installed beside this interpreter")
    # Before pd-doctor's first line runs, Python itself is starting (site, .pth files): on a loaded
    # machine that alone can outlast 0.15 s, and no program can answer a signal there. So the
    # delays count from the end of this interpreter's own start-up, measured here, not from exec.
    starts = []
    for _ in range(3):
        t0 = time.monotonic()
        subprocess.run([sys.executable, "-c", "pass"], check=True)
        starts.append(time.monotonic() - t0)
    startup = sorted(starts)[1]
    for delay in (0.15, 0.25, 0.4):
        delay += 1.5 * startup
        proc = subprocess.Popen(
            [str(script), "check-config", "--prefill-cmd", "vllm serve m"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, "PD_DOCTOR_HOME": str(tmp_path)},
        )
        time.sleep(delay)
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=WALL_S)
        assert b"Traceback" not in err and b"KeyboardInterrupt" not in err, (delay, err.decode()[-1500:])
        assert proc.returncode in (130, -signal.SIGINT, 0, 1), (delay, proc.returncode, err.decode())


# --- the library pieces (in-process, fast) -------------------------------------------------------


def test_versions_are_ascii_and_whole() -> None:
    from vllm_pd_doctor.knowledge.facts import releases
    from vllm_pd_doctor.repro import envs

    for bad in (
        "99.0.0\n",
        "0.28.0\n",
        " 0.28.0",
        "0.\uff12\uff18.0",
        "\u0660.28.0",
        "0.28.0\x00",
        "0.28"[:0],
    ):
        with pytest.raises(BadInput):
            envs.validate("vllm-cpu", bad)
    envs.validate("vllm-cpu", "0.28.0")
    assert not releases.is_release("0.\u0662\u0668.0")
    assert releases.is_release("0.28.0")


def test_a_corrupt_env_marker_affects_that_env_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_pd_doctor.repro import envs

    monkeypatch.setenv("PD_DOCTOR_HOME", str(tmp_path))
    markers: dict[str, bytes] = {
        "0.1.0": b'{"package": "vllm-cpu", "version": "0.1.0", "extras": []}',  # the good one
        "0.2.0": b"\xff\xfe not utf-8",
        "0.3.0": b"[1, 2, 3]",
        "0.4.0": b'{"package": "vllm-cpu", "version": "0.4.0", "extras": 5}',
        "0.5.0": b'{"package": "vllm-cpu", "version": "0.5.0", "install_s": ' + BIG_INT.encode() + b"}",
        "0.6.0": b"[" * 100000 + b"]" * 100000,
        "0.7.0": b'{"package": "vllm-cpu"',
        "0.8.0": b'{"package": 1, "version": "0.8.0"}',
        "0.9.0": b"",
    }
    for version, data in markers.items():
        d = tmp_path / "envs" / f"vllm-cpu-{version}"
        (d / "bin").mkdir(parents=True)
        (d / "bin" / "python").write_text("")
        (d / envs.MARKER).write_bytes(data)
    fifo_env = tmp_path / "envs" / "vllm-cpu-0.10.0"
    (fifo_env / "bin").mkdir(parents=True)
    (fifo_env / "bin" / "python").write_text("")
    os.mkfifo(fifo_env / envs.MARKER)
    t0 = time.monotonic()
    found = envs.list_envs()
    assert [e.version for e in found] == ["0.1.0"]
    assert envs.find("vllm-cpu", "0.3.0") is None and envs.find("vllm-cpu", "0.1.0") is not None
    assert time.monotonic() - t0 < 5.0


def test_home_settings_are_checked(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from vllm_pd_doctor.infra import safeio
    from vllm_pd_doctor.repro import envs

    for bad, needle in (
        ("/dev/null", "not a directory"),
        ("/proc", "kernel"),
        ("~nosuchuser-pd", "no such user"),
    ):
        monkeypatch.setenv("PD_DOCTOR_HOME", bad)
        with pytest.raises(BadInput, match=needle):
            envs.home()
    monkeypatch.setenv("PD_DOCTOR_HOME", "rel/dir")
    assert envs.home() == Path.cwd() / "rel" / "dir"
    monkeypatch.delenv("PD_DOCTOR_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", "relative/cache")  # ignored, as the XDG spec says
    monkeypatch.setenv("HOME", "")
    with pytest.raises(BadInput, match="HOME"):
        safeio.user_cache_base()
    monkeypatch.setenv("HOME", str(tmp_path))
    assert envs.home() == tmp_path / ".cache" / "pd-doctor"
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert envs.home() == tmp_path / "xdg" / "pd-doctor"


def test_output_names_are_checked(tmp_path: Path) -> None:
    from vllm_pd_doctor.infra import safeio

    for bad, needle in (
        ("-", "stdout"),
        (".", "existing directory"),
        ("..", "existing directory"),
        ("/", "existing directory"),
        (str(tmp_path / ("a" * 300)), "bytes long"),
        (str(tmp_path / ("a/" * 2100)) + "x", "longer"),
    ):
        with pytest.raises(BadInput, match=needle):
            safeio.check_output_name(Path(bad))
    safeio.check_output_name(tmp_path / "report.zip")


def test_environment_errors_map_to_exit_codes() -> None:
    import errno as _errno

    from vllm_pd_doctor.infra import errors

    for exc, code in (
        (OSError(_errno.ENOSPC, "No space left on device"), 3),
        (OSError(_errno.EROFS, "Read-only file system", "/home/x"), 3),
        (PermissionError(_errno.EACCES, "Permission denied", "/x"), 3),
        (OSError(_errno.ENAMETOOLONG, "File name too long", "a" * 5000), 3),
        (MemoryError(), 3),
    ):
        assert errors.report_error(exc, debug=False) == code
    try:
        int(BIG_INT)
    except ValueError as exc:
        assert errors.report_error(exc, debug=False) == 2
    assert errors.report_error(RuntimeError("a bug"), debug=False) == 4


def test_yaml_with_a_huge_integer_is_bad_input() -> None:
    with pytest.raises(BadInput, match="convert"):
        limits.load_yaml_documents("block_size: " + BIG_INT + "\n", "launch.yaml")


def test_sanitize_escapes_controls_and_bidi() -> None:
    from dataclasses import dataclass as _dc

    from vllm_pd_doctor.infra import sanitize

    assert sanitize.text("a\x1b[2Jb\x07c\u202ed\te\nf\r") == "a\\x1b[2Jb\\x07c\\u202ed\te\nf\\x0d"
    assert sanitize.line("a\nb") == "a\\nb"
    plain = "nothing to do"
    assert sanitize.text(plain) is plain

    @_dc(frozen=True)
    class Inner:
        name: str

    @_dc(frozen=True)
    class Outer:
        items: tuple[Inner, ...]
        meta: dict[str, str]
        path: Path
        n: int

    o = Outer((Inner("x\x1b]0;t\x07"), Inner("ok")), {"k\x1b": "v\x9b"}, Path("/a\x1bb"), 3)
    c = sanitize.clean(o)
    assert c.items[0].name == "x\\x1b]0;t\\x07" and c.items[1] is o.items[1]
    assert c.meta == {"k\\x1b": "v\\x9b"} and str(c.path) == "/a\\x1bb" and c.n == 3
    assert o.items[0].name.startswith("x\x1b")  # the original is untouched
    ok = Outer((Inner("ok"),), {}, Path("/a"), 1)
    assert sanitize.clean(ok) is ok


def test_child_output_is_read_within_bounds() -> None:
    """procs.run keeps the last MAX_CAPTURE bytes of a child's 100 MB, decodes bad bytes."""
    from vllm_pd_doctor.infra import procs

    code = (
        "import sys; w = sys.stdout.buffer.write\n"
        "for _ in range(100): w(b'x' * (1 << 20))\n"
        "w(b'\\n\\xff{\"last\": 1}\\n')"
    )
    proc = procs.run([sys.executable, "-c", code], timeout=WALL_S, text=True)
    assert proc.returncode == 0
    assert len(proc.stdout) <= procs.MAX_CAPTURE + 16
    assert proc.stdout.rstrip().endswith('{"last": 1}') and "\ufffd" in proc.stdout


def test_target_answers_are_read_within_bounds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from vllm_pd_doctor.infra import targetrun
    from vllm_pd_doctor.infra.errors import CouldNotRun

    ans = tmp_path / "answer.json"
    for data, needle in (
        (b'{"a": "\xff"}', "unreadable"),
        (b"[" * 100000 + b"]" * 100000, "nested too deeply"),
        (b'{"a": ' + BIG_INT.encode() + b"}", "unreadable"),
        (b"[1]", "not a JSON object"),
        (b"x" * 2048, "unreadable"),
    ):
        ans.write_bytes(data)
        with pytest.raises(CouldNotRun, match=needle):
            targetrun.read_answer(str(ans), "the harness", "", 0)
    monkeypatch.setattr(targetrun, "MAX_ANSWER_BYTES", 1000)
    ans.write_bytes(b'{"a": "' + b"x" * 5000 + b'"}')
    with pytest.raises(CouldNotRun, match="MB"):
        targetrun.read_answer(str(ans), "the harness", "", 0)
    with pytest.raises(CouldNotRun, match="without an answer"):
        targetrun.read_answer(str(tmp_path / "none.json"), "the harness", "", 1)


COST_INPUTS: list[tuple[str, str]] = [
    ("lone END after a long line", "x" * 200_000 + "!\n-----END PRIVATE KEY-----\n"),
    ("many lone ENDs", ("x" * 60 + "!\n-----END RSA PRIVATE KEY-----\n") * 3000),
    ("PuTTY headers", "PuTTY-User-Key-File-3: ssh-ed25519\n" * 6000),
    ("http:// + a: x 50k", "http://" + "a:" * 50_000),
    ("name: x 50k", "password:" * 20_000 + "a:" * 30_000),
]


@pytest.mark.parametrize("case", COST_INPUTS, ids=[c[0] for c in COST_INPUTS])
def test_redaction_is_linear_on_hostile_text(case: tuple[str, str]) -> None:
    from vllm_pd_doctor.report.redact import RedactionContext, Redactor

    red = Redactor(RedactionContext())
    red.text("warm up the detectors")
    t0 = time.process_time()
    red.text(case[1])
    assert time.process_time() - t0 < CPU_S, f"{case[0]}: {time.process_time() - t0:.1f} s of CPU"


def test_log_excerpting_is_linear() -> None:
    from vllm_pd_doctor.report import logs

    def cost(n: int) -> tuple[float, logs.LogFindings]:
        text = "\n".join(f"ERROR 12-01 10:00:00 [core.py:{i}] assert num_new_tokens > 0" for i in range(n))
        t0 = time.process_time()
        found = logs.find(text)
        return time.process_time() - t0, found

    # A relation, not one CPU's seconds: 4x the lines costs about 4x (quadratic would be 16x).
    small, _ = cost(25_000)
    big, found = cost(100_000)
    assert big < 7 * max(small, 0.01), (small, big)
    assert found.signatures and found.excerpts  # the assertion is seen (triage's class names it)
