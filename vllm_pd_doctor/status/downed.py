"""What did not answer: an engine (hung, dead, not vLLM, refused) or its NIXL side channel.

Each is a finding of its own with what was tried, so a partial answer still judges the engines that
answered (a dead decode does not hide a prefill that is up) and a silent side channel is never
mistaken for a handshake mismatch.
"""

from __future__ import annotations

from vllm_pd_doctor.results.status import Evidence, Finding
from vllm_pd_doctor.status.window import Window

_ENGINE = {
    "hung": (
        "engine-hung",
        "the {role} engine does not answer within {timeout:g} s: it is hung or overloaded",
        "read its log and stack (py-spy dump); a hung engine core stops every request routed to it",
    ),
    "dead": (
        "engine-dead",
        "the {role} engine is down: nothing answers at {url}",
        "restart it and read its log for the fatal error (EngineDeadError and what came before it); "
        "check the URL (host, port) if it never ran there",
    ),
    "not-vllm": (
        "not-vllm",
        "{url} is not a vLLM server (given as the {role})",
        "give the vLLM API server's URL (its --host and --port), not the proxy's or another service's",
    ),
    "refused": (
        "engine-refused",
        "the {role} engine refuses the read: a token is needed",
        "set PD_DOCTOR_STATUS_TOKEN (or VLLM_API_KEY) to the engine's API key",
    ),
}


def finding(w: Window, timeout: float) -> Finding:
    """An engine that did not answer a reading: error-level (exit code 3)."""
    kind = w.down or "dead"
    fid, title, fix = _ENGINE.get(kind, _ENGINE["dead"])
    sc = w.after if w.after.error else w.before
    tried = "/health, /version, /v1/models, /metrics" if sc is w.before else "/metrics (second reading)"
    return Finding(
        id=fid,
        severity="error",
        title=title.format(role=w.role, timeout=timeout, url=w.after.url),
        evidence=(Evidence(w.label, tried, sc.error or kind),),
        triage_class=None,
        fix=fix,
        next=f"pd-doctor triage --{w.role}-log {w.role}.log",
    )


def side_finding(w: Window, timeout: float) -> Finding:
    """A NIXL side channel that did not answer a handshake request: its handshake fields stay
    unknown (the comparison says so), and a peer's handshake with it would fail the same way."""
    why = w.side_error or "no answer"
    if "no answer" in why:
        title = f"the {w.role}'s NIXL side channel {w.side_address} does not answer within {timeout:g} s"
    elif "refused" in why:
        title = f"nothing listens on the {w.role}'s NIXL side channel {w.side_address}"
    else:
        title = f"the {w.role}'s NIXL side channel {w.side_address} answers, but not as NIXL does"
    return Finding(
        id="side-channel-unanswered",
        severity="warning",
        title=title,
        evidence=(
            Evidence(w.label, "side channel", f'{w.side_address}: sent (b"get_meta_msg", 0, 0): {why}'),
        ),
        triage_class="nixl-handshake-failed",
        fix="check the engine's VLLM_NIXL_SIDE_CHANNEL_HOST/PORT (the port given must be that one), "
        "that it runs a NIXL connector (--kv-transfer-config), and that the port is reachable from here; "
        "a decode that cannot reach a prefill's side channel fails every handshake",
        next="pd-doctor check-config --prefill-cmd '...' --decode-cmd '...'",
    )
