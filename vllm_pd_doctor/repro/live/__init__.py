"""`pd-doctor repro --engine live`: a real prefill/decode pair, or the user's endpoints.

Local mode starts a prefill (P) and a decode (D) vLLM API server as children of the target
interpreter (own process groups, free ports on 127.0.0.1, logs in a run directory), serving a
connector the registry marks `live` (today NIXL), with pd-doctor's vLLM plugin (invllm/plugin.py)
made visible through a private dist-info on their PYTHONPATH and switched on by PD_DOCTOR_TRACE.
Remote mode runs the same probe against existing endpoints. Nothing here imports vLLM or torch.

Where things are: `options` (what was asked, checked), `engines` (every process started and
stopped), `pair` (a running pair for a `with` block), `client` (HTTP), `probe` (warm-up, P->D,
trigger), `evidence` (/metrics, logs, traces), `verdict` (the typed result); the scenarios a
client can trigger on a real pair: `scenarios` (which, and the report), `fate` (did D die, and
where), `extra_block` (d-extra-block), `abort` (abort-race).
"""

from __future__ import annotations

import time
import urllib.parse
from pathlib import Path
from typing import Any

import httpx

from vllm_pd_doctor.infra.errors import BadInput, CouldNotRun, FieldError
from vllm_pd_doctor.infra.progress import Progress
from vllm_pd_doctor.repro.live import engines, evidence
from vllm_pd_doctor.repro.live.client import Client
from vllm_pd_doctor.repro.live.options import (
    CONFIRM_FLAG,
    LiveOptions,
    from_repro_options,
    from_request,
    is_loopback,
    live_connectors,
)
from vllm_pd_doctor.repro.live.pair import local_pair
from vllm_pd_doctor.repro.live.probe import ProbeResult, run_probe
from vllm_pd_doctor.repro.live.verdict import build_verdict, notes, write_result
from vllm_pd_doctor.results.repro import ReproReport, VllmInstall

__all__ = ["LiveOptions", "from_repro_options", "from_request", "run_live", "run_local", "run_remote"]


def run_live(python: str, lo: LiveOptions, progress: Progress) -> ReproReport:
    """A local pair (no `prefill_url`) or the user's endpoints."""
    if lo.remote:
        return run_remote(python, lo, progress)
    return run_local(python, lo, progress)


def _available() -> tuple[str, ...]:
    return tuple(c.key for c in live_connectors())


def run_local(python: str, lo: LiveOptions, progress: Progress) -> ReproReport:
    t_total = time.perf_counter()
    with local_pair(python, lo, progress) as lp:
        res, log_text = _probe(lp.client, lp.engines, lo, lp.run_dir, progress)
    p_eng, d_eng = lp.engines
    events = evidence.read_trace(p_eng.trace)
    verdict = build_verdict(res, events, log_text, str(lp.model), lo)
    timings = {**lp.timings, **res.timings}
    timings["total_s"] = round(time.perf_counter() - t_total, 3)
    write_result(lp.run_dir, res, verdict, timings)
    return ReproReport(
        engine="live",
        vllm=VllmInstall(
            version=lp.interp.vllm_version or "?", path=lp.interp.vllm_path or "?", python=python
        ),
        results=(verdict,),
        available_connectors=_available(),
        timings=timings,
        notes=tuple(_local_notes(res, events, p_eng, d_eng, lp.run_dir, lo, log_text)),
    )


def _probe(
    client: Client, pair: list[engines.Engine], lo: LiveOptions, run_dir: Path, progress: Progress
) -> tuple[ProbeResult, str | None]:
    """The P->D request and the trigger against a healthy pair; the prefill engine's log."""
    p_eng, d_eng = pair
    try:
        res = run_probe(
            client, p_eng.url, d_eng.url, None, lo.prompt_len, progress, p_alive=lambda: p_eng.alive
        )
    except (CouldNotRun, httpx.HTTPError) as exc:
        engines.say_tail(progress, "the prefill engine's log", p_eng.log)
        engines.say_tail(progress, "the decode engine's log", d_eng.log)
        if isinstance(exc, CouldNotRun):
            raise
        raise CouldNotRun(f"the probe failed: {exc}", hint=f"logs: {run_dir}") from None
    time.sleep(0.3)  # let the engine finish writing its traceback
    log_text = evidence.read_log(p_eng.log)
    if res.p_dead:
        _say_traceback(progress, log_text, p_eng)
    if "compatibility check passed" in evidence.read_log(d_eng.log):
        res.transfer["nixl_handshake_logged"] = True
    return res, log_text


def _local_notes(
    res: ProbeResult,
    events: list[dict[str, Any]],
    p_eng: engines.Engine,
    d_eng: engines.Engine,
    run_dir: Path,
    lo: LiveOptions,
    log_text: str | None,
) -> list[str]:
    out = notes(res)
    if lo.hotfix:
        line = evidence.hotfix_line(log_text or "")
        out.append(
            f"hotfix: the prefill engine logged: {line}"
            if line
            else "hotfix: asked for, but the prefill engine logged no 'pd-doctor hotfix' line "
            "(was the plugin loaded?)"
        )
    for frm, to in evidence.conv_layout_restored(events):
        out.append(
            f"this vLLM's CPU platform set VLLM_SSM_CONV_STATE_LAYOUT={frm} (it does so "
            f"on CPUs with AMX), which NIXL cannot transfer for Mamba; pd-doctor's plugin "
            f"kept the explicit {to} in the engine processes (later releases keep it)"
        )
    if not events:
        out.append(
            f"the plugin recorded no events: which truncation path ran is unknown (trace {p_eng.trace})"
        )
    out += [
        f"prefill log: {p_eng.log}",
        f"decode log: {d_eng.log}",
        f"prefill trace: {p_eng.trace}",
        f"run directory: {run_dir}",
    ]
    return out


def _say_traceback(progress: Progress, log_text: str, p_eng: engines.Engine, n: int = 14) -> None:
    """The end of the fatal traceback in P's log (its tail is often shutdown noise)."""
    tb = (evidence.assertion_from_log(log_text) or {}).get("traceback")
    if not tb:
        engines.say_tail(progress, "the prefill engine's log", p_eng.log, n)
        return
    excerpt = "\n".join(tb.splitlines()[-n:])
    progress(f"the prefill engine's traceback ({p_eng.log}):\n" + excerpt)


def run_remote(python: str, lo: LiveOptions, progress: Progress) -> ReproReport:
    """Probe existing engines: W from P's /metrics (`lo.block_size` only when it cannot say)."""
    assert lo.prefill_url is not None
    for u in (lo.prefill_url, lo.decode_url):
        if u and not urllib.parse.urlparse(u).scheme.startswith("http"):
            raise BadInput(f"{u}: not an http(s) URL", hint="e.g. http://10.0.0.5:8000")
    if not is_loopback(lo.prefill_url) and not lo.confirm_remote:
        raise FieldError(
            ("prefill_url", "confirm_remote"),
            "{flag} {value}: this probe can kill the prefill engine there (vLLM #53514)",
            value=lo.prefill_url,
            hint="add {1} to run it against a non-local engine",
            usual={"confirm_remote": CONFIRM_FLAG},
        )
    p_url = lo.prefill_url.rstrip("/")
    d_url = lo.decode_url.rstrip("/") if lo.decode_url else None
    progress(
        f"remote probe against prefill {p_url}"
        + (f", decode {d_url}" if d_url else "")
        + ": THIS MAY KILL THE PREFILL ENGINE"
    )
    client = Client()
    t0 = time.perf_counter()
    try:
        if not client.healthy(p_url):
            raise CouldNotRun(f"the prefill engine at {p_url} is not healthy (/health)")
        res = run_probe(client, p_url, d_url, lo.block_size, lo.prompt_len, progress)
    except httpx.HTTPError as exc:
        raise CouldNotRun(f"the remote probe failed: {exc}") from None
    finally:
        client.close()
    verdict = build_verdict(res, [], None, res.model, lo)
    timings = {**res.timings, "total_s": round(time.perf_counter() - t0, 3)}
    out = [
        *notes(res),
        f"remote run against {p_url}: the prefill engine "
        f"{'was killed by this probe' if res.p_dead else 'survived'}",
        "which truncation path ran is not visible remotely (it needs pd-doctor's vLLM "
        "plugin in the server's environment and PD_DOCTOR_TRACE set)",
    ]
    return ReproReport(
        engine="live-remote",
        vllm=VllmInstall(version="remote", path=p_url, python=python),
        results=(verdict,),
        available_connectors=_available(),
        timings=timings,
        notes=tuple(out),
    )
