"""The typed verdict of a live run, from the probe's result, the plugin's trace and P's log.

Evidence, strongest first: the plugin's exception event (inside the engine), the traceback in
P's log, the HTTP answer. Remotely there is neither trace nor log, so P's death is the evidence.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

from vllm_pd_doctor.invllm import wire
from vllm_pd_doctor.invllm.observe import Recorder
from vllm_pd_doctor.repro.live.client import Outcome
from vllm_pd_doctor.repro.live.evidence import assertion_from_log, fatal_line, summary_for, trace_for
from vllm_pd_doctor.repro.live.options import LiveOptions
from vllm_pd_doctor.repro.live.probe import ProbeResult
from vllm_pd_doctor.results.repro import (
    Assertion,
    ConnectorVerdict,
    Control,
    Event,
    RunError,
    ScenarioConfig,
    Truncation,
)


@dataclass(frozen=True)
class _Death:
    """What the prefill engine's death says about the assertion (the strongest evidence first)."""

    fired: bool = False
    location: str | None = None
    statement: str | None = None
    traceback: str | None = None
    matches: bool = False


def _exception(rec: Recorder, events: list[dict[str, Any]]) -> wire.ExceptionEvent | None:
    """The plugin's exception event of the trigger request, else any exception event."""
    found = next((e for e in rec.events if e.get("kind") == "exception"), None)
    if found is None:
        found = next((e for e in events if e.get("kind") == "exception"), None)
    return cast(wire.ExceptionEvent, found) if found is not None else None


def _death(
    exc: wire.ExceptionEvent | None, trig: Outcome, log_text: str | None, events: list[dict[str, Any]]
) -> _Death:
    """The assertion as the trace, P's log and the HTTP answer show it (the engine died)."""
    location = statement = tb = None
    from_log = assertion_from_log(log_text or "") if log_text is not None else None
    loc = exc.get("location") if exc is not None else None
    if exc is not None and loc:
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
    fired = (exc is not None and exc.get("type") == "AssertionError") or (
        from_log is not None and "AssertionError" in (from_log["traceback"] or "")
    )
    if log_text is None and not events:  # remote: no log, no trace; death is the evidence
        fired = True
        statement = (
            f"the prefill engine died on the N-1 trigger (HTTP "
            f"{trig.status or trig.error}, /health failing); the assertion itself "
            "is only visible in its log"
        )
    return _Death(fired, location, statement, tb, matches)


def _lengths(rec: Recorder, summary: wire.TruncationSummary | None) -> tuple[Any, Any, Any]:
    """(hit, prompt length before, after) of the trigger request, from the trace."""
    if summary is None:
        return None, None, None
    adds = rec.of_kind("add_request")
    before = adds[0].get("num_tokens") if adds else None
    lens = [e.get("num_tokens") for e in rec.events if e.get("num_tokens") is not None]
    return summary["hit_tokens"], before, (lens[-1] if lens else None)


def build_verdict(
    res: ProbeResult, events: list[dict[str, Any]], log_text: str | None, model: str, lo: LiveOptions
) -> ConnectorVerdict:
    """`events`: the prefill engine's trace ([] remotely); `log_text`: its log (None remotely)."""
    trig = res.trigger or Outcome(status=None)
    rec = trace_for(events, res.tags["trigger"])
    summary = summary_for(events, res.tags["trigger"])
    exc = _exception(rec, events)
    died = res.p_dead or trig.status == 500 or trig.status is None
    d = _death(exc, trig, log_text, events) if died else _Death()
    hit, before, after = _lengths(rec, summary)
    error = None
    if died and not d.fired:
        why = (
            f"{exc.get('type')}: {exc.get('message')}"
            if exc is not None
            else fatal_line(log_text or "") or f"HTTP {trig.status or trig.error}"
        )
        error = RunError(
            kind="engine_died",
            stage="trigger",
            message=f"the prefill engine failed on the trigger, but not with an assertion: {why}",
            traceback=d.traceback,
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
            fired=d.fired,
            location=d.location,
            statement=d.statement,
            matches_53514=d.matches,
            traceback=d.traceback,
        ),
        truncation=Truncation.from_observed(summary, missing="unknown" if not events else "none"),
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
