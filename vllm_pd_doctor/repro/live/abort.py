"""abort-race on a real pair: the client goes away while D's request waits for its KV (vllm#46240).

Each attempt has P prefill a fresh prompt, sends D the request with P's kv_transfer_params over a
raw HTTP connection and closes the connection after a delay: vLLM's completion endpoint
(`with_cancellation`) aborts the request, the EngineCore's `Scheduler.finish_requests` finishes
it, and a request still in WAITING_FOR_REMOTE_KVS keeps its blocks until its receive is reported
(`_update_from_kv_xfer_finished`: the first loop frees it). #46240's crash needs one step that
lists the aborted request in finished_recving *and* finished_sending; a D whose only connector is
NIXL as kv_consumer holds no request for sending (`request_finished` returns before it for a
D-side request unless bidirectional KV transfer is on, and an aborted one is never held, in
0.28.0 and 0.32.0), so on such a pair the race window does not open and the attempts exercise
the abort-in-flight path beside it. pd-doctor's plugin records in D's trace each abort with the
request's status when it landed and each step's finished transfers, so the output says how many
attempts landed while the KV was in flight and whether the same-step window was ever hit.

The delay is steered by that trace (too early: the abort landed before D scheduled the request;
too late: the request had its KV); remotely there is no trace and the delays are a fixed sweep.
The control: a request that is not aborted, answered, with D's blocks all free afterwards.
The deterministic reproduction is the in-process scenario (`pd-doctor repro --scenario abort-race`).
"""

from __future__ import annotations

import contextlib
import json
import select
import socket
import time
import urllib.parse
from dataclasses import dataclass
from typing import Any

import httpx

from vllm_pd_doctor.knowledge.facts import metrics
from vllm_pd_doctor.repro.live import evidence
from vllm_pd_doctor.repro.live.fate import Ctx, Fate, d_alive_now, outcome, read_fate, say_death
from vllm_pd_doctor.repro.live.probe import prompt
from vllm_pd_doctor.results.scenarios import CONTROL_FAILED, FAILS, HOLDS, Outcome, ScenarioCell

ID = "abort-race"
ATTEMPTS = 12
"""Aborts tried (a race: bounded, and each one says where it landed)."""
FIRST_DELAY_S = 0.004
MAX_DELAY_S = 2.0
IN_FLIGHT = "WAITING_FOR_REMOTE_KVS"
SETTLE_S = 10.0
"""How long D is given, after the attempts, to free every block and finish every request."""


@dataclass
class Attempt:
    delay_s: float
    answered_first: bool
    """D answered before the client closed (the abort came too late)."""
    landed: str | None = None
    """The request's status when the abort reached D's scheduler (from D's trace); None: unknown
    or never (it had finished, or never reached the scheduler)."""


def _close_after(ctx: Ctx, body: dict[str, Any], tag: str, delay: float) -> bool:
    """POST `body` to D on a raw connection and close it after `delay` s: True if D answered first."""
    u = urllib.parse.urlparse(ctx.d.url)
    data = json.dumps(body).encode()
    head = (
        f"POST /v1/completions HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(data)}\r\n"
        f"X-Request-Id: {tag}\r\nConnection: close\r\n\r\n"
    ).encode()
    with socket.create_connection((u.hostname or "127.0.0.1", u.port or 80), timeout=10) as s:
        s.sendall(head + data)
        ready, _, _ = select.select([s], [], [], delay)
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)
    return bool(ready)


def _prefill(ctx: Ctx, n: int, name: str) -> tuple[list[int], dict[str, Any] | None]:
    tokens = prompt(ctx.run_id + name, n)
    ans = ctx.client.complete(
        ctx.p.url, ctx.model, tokens, max_tokens=1, tag=ctx.tag(name + "-p"), kv={"do_remote_decode": True}
    )
    return tokens, ans.kv_transfer_params if ans.status == 200 else None


def _landed(ctx: Ctx, tag: str) -> tuple[str | None, bool]:
    """Where the abort of `tag` landed (D's trace) and whether the scheduler ever saw `tag`."""
    if ctx.d.trace is None:
        return None, False
    events = evidence.read_trace(ctx.d.trace)
    seen = any(tag in str(e.get("request_id", "")) for e in events if e.get("kind") == "add_request")
    for e in events:
        if e.get("kind") == "finish_requests":
            for rid, status in (e.get("before") or {}).items():
                if tag in rid:
                    return status, seen
    return None, seen


def _next_delay(delay: float, a: Attempt, seen: bool) -> float:
    """Steer toward the in-flight window: later when the abort came before the scheduler had the
    request, earlier when D already had its KV (or answered), the same when it hit."""
    if a.landed == IN_FLIGHT:
        return delay
    if a.answered_first or a.landed in ("RUNNING",) or (a.landed is None and seen):
        return max(delay / 1.6, 0.0005)
    return min(delay * 1.6, MAX_DELAY_S)


def _attempts(ctx: Ctx, n: int) -> tuple[list[Attempt], Fate | None]:
    out: list[Attempt] = []
    delay = FIRST_DELAY_S
    for i in range(ATTEMPTS):
        name = f"abort-{i}"
        tokens, kv = _prefill(ctx, n, name)
        if kv is None:
            break
        body = {"model": ctx.model, "prompt": tokens, "max_tokens": 2, "temperature": 0.0}
        body["kv_transfer_params"] = kv
        tag = ctx.tag(name + "-d")
        a = Attempt(delay_s=round(delay, 4), answered_first=_close_after(ctx, body, tag, delay))
        out.append(a)
        time.sleep(0.3)  # the abort reaches the EngineCore, the trace is written
        if not d_alive_now(ctx):
            fate = read_fate(ctx, None)
            say_death(ctx, fate)
            return out, fate
        a.landed, seen = _landed(ctx, tag)
        delay = FIRST_DELAY_S * 1.6 ** (i + 1) if ctx.d.trace is None else _next_delay(delay, a, seen)
    return out, None


def _same_step(ctx: Ctx) -> int:
    """Steps that listed an aborted request in finished_recving and finished_sending (#46240)."""
    if ctx.d.trace is None:
        return 0
    hits = 0
    for e in evidence.read_trace(ctx.d.trace):
        if e.get("kind") == "kv_xfer_finished" and ctx.run_id in json.dumps(e.get("status")):
            both = set(e.get("recving") or ()) & set(e.get("sending") or ())
            status = e.get("status") or {}
            hits += sum(1 for r in both if str(status.get(r)).startswith("FINISHED"))
    return hits


def _settled(ctx: Ctx) -> dict[str, Any]:
    """D's requests and KV cache usage once the aborts are over (every block should be free)."""
    seen: dict[str, Any] = {}
    deadline = time.perf_counter() + SETTLE_S
    while time.perf_counter() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            text = ctx.client.text(ctx.d.url, "/metrics")
            seen = {
                "d_requests_running": evidence.gauge(text, metrics.RUNNING),
                "d_requests_waiting": evidence.gauge(text, metrics.WAITING),
                "d_kv_cache_usage": evidence.gauge(text, metrics.KV_USAGE),
            }
            if not any(v for v in seen.values()):
                break
        time.sleep(0.5)
    return seen


def _control(ctx: Ctx, n: int) -> Outcome:
    tokens, kv = _prefill(ctx, n, "abort-control")
    ans = ctx.client.complete(
        ctx.d.url, ctx.model, tokens, max_tokens=2, tag=ctx.tag("abort-control-d"), kv=kv
    )
    fate = read_fate(ctx, ans)
    say_death(ctx, fate)
    return outcome(fate, {"d_tokens": ans.token_ids})


def run(ctx: Ctx) -> ScenarioCell:
    t0 = time.perf_counter()
    n = ctx.block_size + 1
    tries, fate = _attempts(ctx, n)
    landed = [a.landed for a in tries]
    in_flight = landed.count(IN_FLIGHT)
    same = _same_step(ctx)
    observed: dict[str, Any] = {
        "attempts": len(tries),
        "aborts_in_flight": in_flight if ctx.d.trace is not None else None,
        "same_step_recv_and_send": same if ctx.d.trace is not None else None,
        "attempt_log": [a.__dict__ for a in tries],
    }
    ctx.progress(
        f"{ID}: {len(tries)} aborts, {in_flight} landed while D waited for the KV, "
        f"{same} step(s) listed an aborted request as received and sent"
        if ctx.d.trace is not None
        else f"{ID}: {len(tries)} aborts (where they landed is not visible remotely)"
    )
    notes = [_window_note(ctx, len(tries), in_flight, same), _deterministic_note()]
    if fate is not None:
        recipe = outcome(fate, observed)
        return ScenarioCell(ID, ctx.connector, FAILS, recipe=recipe, notes=tuple(notes), elapsed_s=_since(t0))
    observed.update(_settled(ctx))
    stranded = bool(observed.get("d_kv_cache_usage")) or bool(observed.get("d_requests_running"))
    recipe = (
        Outcome(
            failed=True,
            how="invariant",
            invariant="D still holds KV blocks or requests after every aborted request finished",
            observed=observed,
        )
        if stranded
        else Outcome(failed=False, observed=observed)
    )
    control = _control(ctx, n)
    status = CONTROL_FAILED if control.failed else (FAILS if recipe.failed else HOLDS)
    reason = f"D survived {len(tries)} aborts" + (
        f" ({in_flight} while its KV was in flight; the same-step window was {'hit' if same else 'not hit'})"
        if ctx.d.trace is not None
        else ""
    )
    return ScenarioCell(
        ID,
        ctx.connector,
        status,
        recipe=recipe,
        control=control,
        reason=reason,
        notes=tuple(notes),
        elapsed_s=_since(t0),
    )


def _since(t0: float) -> float:
    return round(time.perf_counter() - t0, 3)


def _window_note(ctx: Ctx, tries: int, in_flight: int, same: int) -> str:
    if ctx.d.trace is None:
        return (
            f"{tries} aborts at delays swept from {FIRST_DELAY_S * 1000:.0f} ms; where they landed is "
            "not visible remotely (it needs pd-doctor's plugin in D), so whether the window was hit "
            "is unknown"
        )
    hit = "was hit" if same else "was not hit"
    return (
        f"{tries} aborts; {in_flight} landed while D's request waited for its KV (the abort-in-flight "
        f"path); the race window of #46240 (an aborted request received and sent in one step) {hit}"
        + ("" if same else ": D's NIXL connector (kv_consumer) holds no request for sending")
    )


def _deterministic_note() -> str:
    return (
        "a race: a survival here does not clear the release; the deterministic reproduction is "
        "the in-process scenario: pd-doctor repro --scenario abort-race"
    )
