"""hybrid-load-failure: a failed KV load for a model with several KV cache groups (vllm#45474).

A D-side request waits for remote KV and the load fails. The worker reports it the way the
release's KVConnectorOutput lets it: `failed_recving` (with the request in finished_recving, as
NIXL's worker does) where that field exists, else the failed blocks in `invalid_block_ids`, the only
channel older releases have. Releases whose invalid-block recovery unpacks a single KV cache group
(`(req_block_ids,) = ...get_block_ids(req_id)`) raise `ValueError: too many values to unpack` in
Scheduler._update_requests_with_invalid_blocks. Where nothing raises, the request must still end
(failed or recomputed) within a few steps. The control's load succeeds.
"""

from __future__ import annotations

from typing import Any

from .common import (
    Ctx,
    Outcome,
    add_waiting_d_request,
    attempt,
    has_field,
    held,
    kv_output,
    step,
)

KV_ROLE = "kv_consumer"
MAX_STEPS = 8
OUTPUTS = ("vllm.v1.outputs", "KVConnectorOutput")


WAIT = "so no asynchronous load can fail and reach the scheduler's recovery of a failed load"
BLOCK_LEVEL = "invalid_block_ids"


def _failure_report(sched: Any, rid: str, channel: str | None = None) -> tuple[str, dict[str, Any]]:
    """The worker's report of the failed load, through the channel this release offers (or the one
    asked: `invalid_block_ids`, as a connector that reports load errors per block does)."""
    if channel is None and has_field(OUTPUTS, "failed_recving"):
        return "failed_recving", {"finished_recving": {rid}, "failed_recving": {rid}}
    groups = sched.kv_cache_manager.get_block_ids(rid)
    blocks = {int(b) for g in groups for b in g if int(b) != 0}
    return "invalid_block_ids", {"invalid_block_ids": blocks}


def _run(ctx: Ctx, vllm_name: str, fail: bool, channel: str | None = None) -> Outcome:
    sched, rf = ctx.scheduler(vllm_name, KV_ROLE)
    groups = len(sched.kv_cache_config.kv_cache_groups)
    rid = "load-" + ("failed" if fail else "ok") + (f"-{channel}" if channel else "")
    req = add_waiting_d_request(ctx, sched, rf, rid, why=WAIT)
    if fail:
        channel, sets = _failure_report(sched, rid, channel)
    else:
        channel, sets = "finished_recving", {"finished_recving": {rid}}

    def go() -> Outcome:
        step(sched, kv_output(**sets))
        steps = 1
        while rid in sched.requests and not req.is_finished() and steps < MAX_STEPS:
            step(sched)
            steps += 1
        observed = {
            "steps": steps,
            "final_status": str(getattr(req.status, "name", req.status)),
            "in_requests_after": rid in sched.requests,
        }
        if not req.is_finished():
            return held(False, observed, f"the request never finished ({MAX_STEPS} steps after the load)")
        return held(True, observed)

    out = attempt(go)
    out["observed"].update(kv_cache_groups=groups, channel=channel)
    return out


def run(ctx: Ctx, key: str, vllm_name: str) -> dict[str, Any]:
    recipe = _run(ctx, vllm_name, fail=True)
    groups = recipe["observed"]["kv_cache_groups"]
    notes = []
    if groups == 1:
        notes.append("this model has one KV cache group: the single-group recovery path ran")
    out: dict[str, Any] = {"recipe": recipe, "control": _run(ctx, vllm_name, fail=False), "notes": notes}
    if not recipe["failed"] and recipe["observed"]["channel"] != BLOCK_LEVEL:
        # It held through the per-request report; the same failure reported per block (as a
        # connector with block-level load errors reports it) may still break: say for which it holds.
        block = _run(ctx, vllm_name, fail=True, channel=BLOCK_LEVEL)
        out["variants"] = {"block_level": block}
        if block["failed"]:
            where = block.get("location") or block.get("invariant")
            notes.append(
                f"holds for {key}, which reports a failed load per request (failed_recving); the same "
                f"failure reported per block (invalid_block_ids, as a connector reporting block-level "
                f"load errors does) fails: {block.get('exception') or 'invariant'} at {where}"
            )
    return out
