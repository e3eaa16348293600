"""abort-race: an aborted request whose KV receive and send finish in the same step (vllm#46240).

A D-side request waits for remote KV; the client aborts it. vLLM keeps it (its blocks are being
written) until the worker reports the transfer done. When one step's KVConnectorOutput lists it in
both finished_recving and finished_sending, the first loop of Scheduler._update_from_kv_xfer_finished
frees it and the second asserts `req_id in self.requests`. The control reports only the receive.
The invariants where nothing raised: the request is gone and every block is free again.
"""

from __future__ import annotations

from typing import Any

from .common import Ctx, Outcome, add_waiting_d_request, attempt, free_blocks, held, kv_output, step

KV_ROLE = "kv_consumer"


def _run(ctx: Ctx, vllm_name: str, both: bool) -> Outcome:
    sched, rf = ctx.scheduler(vllm_name, KV_ROLE)
    free0 = free_blocks(sched)
    rid = "abort-race-" + ("both" if both else "recv")
    add_waiting_d_request(ctx, sched, rf, rid)
    aborted = _abort(sched, rid)
    kept = rid in sched.requests
    sets: dict[str, Any] = {"finished_recving": {rid}}
    if both:
        sets["finished_sending"] = {rid}

    def go() -> Outcome:
        step(sched, kv_output(**sets))
        step(sched)
        free1 = free_blocks(sched)
        observed = {
            "aborted": aborted,
            "kept_after_abort": kept,
            "in_requests_after": rid in sched.requests,
            "free_blocks_before": free0,
            "free_blocks_after": free1,
        }
        if rid in sched.requests:
            return held(False, observed, "the aborted request was never freed (its blocks stranded)")
        if free0 is not None and free1 != free0:
            return held(False, observed, f"{free0 - (free1 or 0)} blocks stranded after the abort")
        return held(True, observed)

    return attempt(go)


def _abort(sched: Any, rid: str) -> str:
    from vllm.v1.request import RequestStatus

    sched.finish_requests(rid, RequestStatus.FINISHED_ABORTED)
    return "Scheduler.finish_requests(FINISHED_ABORTED)"


def run(ctx: Ctx, key: str, vllm_name: str) -> dict[str, Any]:
    return {"recipe": _run(ctx, vllm_name, both=True), "control": _run(ctx, vllm_name, both=False)}
