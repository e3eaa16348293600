"""The typed verdict of a live run, from the probe's result, the plugin's trace and P's log.

Evidence, strongest first: the plugin's exception event (inside the engine), the traceback in
P's log, the HTTP answer. Remotely there is neither trace nor log, so P's death is the evidence.
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from vllm_pd_doctor.live.client import Outcome
from vllm_pd_doctor.live.evidence import assertion_from_log, fatal_line, summary_for, trace_for
from vllm_pd_doctor.live.options import LiveOptions
from vllm_pd_doctor.live.probe import ProbeResult
from vllm_pd_doctor.model import (
    Assertion,
    ConnectorVerdict,
    Control,
    Event,
    RunError,
    ScenarioConfig,
    Truncation,
)


def build_verdict(
    res: ProbeResult, events: list[dict[str, Any]], log_text: str | None, model: str, lo: LiveOptions
) -> ConnectorVerdict:
    """`events`: the prefill engine's trace ([] remotely); `log_text`: its log (None remotely)."""
    trig = res.trigger or Outcome(status=None)
    rec = trace_for(events, res.tags["trigger"])
    summary = summary_for(events, res.tags["trigger"])
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
        fired = exc_type == "AssertionError" or (
            from_log is not None and "AssertionError" in (from_log["traceback"] or "")
        )
        if log_text is None and not events:  # remote: no log, no trace; death is the evidence
            fired = True
            statement = (
                f"the prefill engine died on the N-1 trigger (HTTP "
                f"{trig.status or trig.error}, /health failing); the assertion itself "
                "is only visible in its log"
            )
    truncation = Truncation.from_observed(summary, missing="unknown" if not events else "none")
    hit = before = after = None
    if summary is not None:
        hit = summary["hit_tokens"]
        adds = rec.of_kind("add_request")
        if adds:
            before = adds[0].get("num_tokens")
        lens = [e.get("num_tokens") for e in rec.events if e.get("num_tokens") is not None]
        after = lens[-1] if lens else None
    error = None
    if died and not fired:
        why = (
            f"{exc_type}: {exc.get('message')}"
            if exc is not None
            else fatal_line(log_text or "") or f"HTTP {trig.status or trig.error}"
        )
        error = RunError(
            kind="engine_died",
            stage="trigger",
            message=f"the prefill engine failed on the trigger, but not with an assertion: {why}",
            traceback=tb,
        )
    entry = lo.entry
    ready = next((e for e in events if e.get("kind") == "scheduler_ready"), {})
    return ConnectorVerdict(
        error=error,
        connector=entry.key,
        label=entry.label,
        kv_connector=entry.vllm_names[0],
        connector_class=ready.get("connector_class"),
        transfer_library=entry.library,
        config=ScenarioConfig(
            block_size=res.block_size,
            prompt_len=res.prompt_len,
            mamba_cache_mode=lo.effective_mamba_cache_mode,
            kv_role="kv_producer",
            model=model,
        ),
        assertion=Assertion(
            fired=fired, location=location, statement=statement, matches_53514=matches, traceback=tb
        ),
        truncation=truncation,
        hit_tokens=hit,
        prompt_len_before=before,
        prompt_len_after=after,
        control=_control(res, events),
        scheduled_tokens=(
            after - hit
            if isinstance(after, int) and isinstance(hit, int) and not died
            else (0 if died else None)
        ),
        events=tuple(Event.from_dict(_timeline_event(e)) for e in rec.events),
        elapsed_s=res.timings.get("probe_s"),
    )


def _control(res: ProbeResult, events: list[dict[str, Any]]) -> Control:
    """The control shown: the first, cold-cache request of the same prompt (it ran, with no
    prefix hit); the N-2-hit control is opt-in (see probe) and replaces it when it ran."""
    if res.control is not None:
        cs = summary_for(events, res.tags["control"])
        return Control(
            prompt_len=res.prompt_len + 1,
            assertion_fired=res.control.status != 200,
            hit_tokens=cs["hit_tokens"] if cs else None,
            scheduled_tokens=0,
            truncation_hook=str(cs["hook"]) if cs else "none",
            label="control (N+1 prompt, N-1 hit)",
        )
    ws = summary_for(events, res.tags["warm"])
    return Control(
        prompt_len=res.prompt_len,
        assertion_fired=False,
        hit_tokens=ws["hit_tokens"] if ws else None,
        scheduled_tokens=0,
        truncation_hook=str(ws["hook"]) if ws else "unknown",
        label="control (cold cache, same prompt)",
    )


def _timeline_event(e: dict[str, Any]) -> dict[str, Any]:
    """A trace event in the in-process engine's shape (phase trigger; exception -> assertion)."""
    ev = {k: v for k, v in e.items() if k != "pid"}
    ev["phase"] = "trigger"
    if e.get("kind") == "exception":
        loc = e.get("location") or {}
        ev = {
            "seq": e.get("seq"),
            "t_ms": e.get("t_ms"),
            "phase": "trigger",
            "kind": "assertion" if e.get("type") == "AssertionError" else "exception",
            "request_id": e.get("request_id"),
            "location": f"{loc.get('file')}:{loc.get('line')}" if loc else None,
            "statement": loc.get("code") or f"{e.get('type')}: {e.get('message')}",
        }
    return ev


def notes(res: ProbeResult) -> list[str]:
    """The probe's notes, then what the control was and how the P->D request went."""
    out = list(res.notes)
    if res.control is None:
        out.append(
            "control: the first (cold-cache) request of the same prompt, which had no "
            "prefix hit; the N-2-hit control runs in the in-process engine"
        )
    t = res.transfer
    if "decode_status" in t:
        out.append(
            f"P->D: decode HTTP {t.get('decode_status')}, tokens {t.get('decode_tokens')}"
            f", equal to D's local greedy output: {t.get('matches_reference')}; NIXL "
            f"bytes {t.get('bytes')}, transfers {t.get('transfers')}, failures "
            f"{t.get('failures')}"
        )
    return out


def write_result(
    run_dir: Path, res: ProbeResult, verdict: ConnectorVerdict, timings: dict[str, float]
) -> None:
    """`result.json` in the run directory: the probe's raw figures beside the verdict's gist."""
    doc = {
        "timings": timings,
        "transfer": res.transfer,
        "block_size": res.block_size,
        "prompt_len": res.prompt_len,
        "p_dead": res.p_dead,
        "tags": res.tags,
        "trigger": {
            "status": res.trigger.status if res.trigger else None,
            "error": res.trigger.error if res.trigger else None,
        },
        "assertion_fired": verdict.assertion.fired if verdict.assertion else None,
        "truncation_hook": verdict.truncation.hook if verdict.truncation else None,
    }
    with contextlib.suppress(OSError):
        (run_dir / "result.json").write_text(json.dumps(doc, indent=2, default=str), encoding="utf-8")
