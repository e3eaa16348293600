"""d-extra-block: D allocates one block more than P sent when a proxy appends the first token (PR #50558).

A proxy that hands D the prompt plus P's first token makes D's prompt N+1 tokens long. When N is an
exact block multiple, D's connector asks for all N+1 prompt tokens from P and the scheduler
allocates N/bs + 1 blocks, while P computed and sent N/bs. The scheduler half runs on two real
schedulers (P: prompt N, do_remote_decode; D: prompt N+1 with P's kv_transfer_params) and reads the
blocks D's connector hands its worker (the connector metadata's `reqs_to_recv`). The worker half is
vLLM's own `_apply_prefix_caching`, called as the NIXL pull worker calls it on those block lists (a
pure function of them: the worker is built without its `__init__`, which needs the NIXL library).
Releases with `assert num_local_blocks <= len(remote_group)` (or `num_decode_blocks <=
len(prefill_group)`) raise it there. The control: the proxy hands D the prompt P computed.
"""

from __future__ import annotations

import inspect
from typing import Any

from .. import drive, triggers
from .common import Ctx, NotApplicable, Outcome, attempt, held, prefill_params, statement_in

KV_ROLE = "kv_consumer"
NIXL = "vllm.distributed.kv_transfer.kv_connector.v1.nixl"
WORKERS = {
    "nixl": [(f"{NIXL}.pull_worker", "NixlPullConnectorWorker")],
    "nixl-push": [(f"{NIXL}.push_worker", "NixlPushConnectorWorker")],
}
"""The worker that trims D's and P's block lists: pull's D worker before its READ, push's P worker
before its WRITE (both pass D's list first)."""
BLOCKS = 2
FIRST_TOKEN = 7
"""The token P generated, which the proxy appends (the fabricated model step samples 7)."""


def _groups(ids: Any) -> list[list[int]]:
    ids = list(ids or [])
    if ids and isinstance(ids[0], (list, tuple)):
        return [[int(b) for b in g] for g in ids]
    return [[int(b) for b in ids]]


def _recv_meta(so: Any, rid: str) -> Any:
    meta = getattr(so, "kv_connector_metadata", None)
    reqs = getattr(meta, "reqs_to_recv", None)
    if not isinstance(reqs, dict) or rid not in reqs:
        raise NotApplicable("D's connector metadata has no reqs_to_recv entry for the request")
    return reqs[rid]


def _d_blocks(ctx: Ctx, vllm_name: str, sched: Any, rf: Any, append: bool, rid: str) -> dict[str, Any]:
    """P runs an N-token prompt (N = a block multiple); D gets it (with P's first token appended if
    `append`) with P's params: the blocks each side has for the transfer."""
    prompt = triggers.prompt_tokens(BLOCKS * int(sched.block_size), ctx.vocab())
    d_prompt = [*prompt, FIRST_TOKEN] if append else prompt
    params = prefill_params(ctx, vllm_name, prompt, rid)
    req = rf.make(rid, d_prompt, params)
    sched.add_request(req)
    so = sched.schedule()
    status = str(getattr(req.status, "name", req.status))
    if status != "WAITING_FOR_REMOTE_KVS":
        raise NotApplicable(f"the connector left the D request {status}: it never waited for remote KV")
    m = _recv_meta(so, rid)
    remote = getattr(getattr(m, "remote", None), "block_ids", None) or getattr(m, "remote_block_ids", None)
    remote = remote if remote is not None else params.get("remote_block_ids")
    if not any(_groups(remote)):  # push: P keeps its block ids (it WRITEs): the ones its prompt filled
        remote = list(range(1, len(prompt) // int(sched.block_size) + 1))
    return {
        "block_size": int(sched.block_size),
        "p_prompt_len": len(prompt),
        "d_prompt_len": len(d_prompt),
        "d_blocks": _groups(m.local_block_ids),
        "p_blocks": _groups(remote),
    }


def _calls_apply(cls: Any) -> bool:
    """The worker's own code calls `_apply_prefix_caching` (push workers before 0.28-era releases
    trim inline instead), read from its source."""
    try:
        return "_apply_prefix_caching(" in inspect.getsource(cls)
    except (OSError, TypeError):
        return True


def _inline_trim(cls: Any) -> Outcome | None:
    """Where a worker that does not call `_apply_prefix_caching` cuts D's longer block list to P's
    (`remote_block_ids[i] = remote_block_ids[i][:num_local]`): the extra block is never written."""
    import ast

    def cuts(node: Any, _parents: list[Any]) -> bool:  # push: `remote` is D, the longer list
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Subscript)):
            return False
        target = node.targets[0]
        if not (isinstance(node.value.slice, ast.Slice) and isinstance(target, ast.Subscript)):
            return False
        return isinstance(target.value, ast.Name) and "remote" in target.value.id

    return statement_in(cls, ("_xfer_blocks",), cuts)


def _apply(key: str, d_blocks: list[list[int]], p_blocks: list[list[int]]) -> Any:
    """vLLM's worker-side trim, called as the worker calls it (dense model: no Mamba)."""
    cls = drive.import_first("import the NIXL worker", WORKERS[key])
    if not _calls_apply(cls):
        return _inline_trim(cls)
    worker = object.__new__(cls)
    worker._has_mamba = False
    try:
        fn = worker._apply_prefix_caching
        names = list(inspect.signature(fn).parameters)
        ints = {n: 1 for n in names[2:]}  # physical blocks per logical block: 1 on both sides
        return fn(d_blocks, p_blocks, **ints)
    finally:
        worker.__dict__.clear()


def _run(ctx: Ctx, key: str, vllm_name: str, append: bool) -> Outcome:
    sched, rf = ctx.scheduler(vllm_name, KV_ROLE)
    rid = "d-extra-" + ("appended" if append else "same")
    blocks = _d_blocks(ctx, vllm_name, sched, rf, append, rid)
    observed = {
        **blocks,
        "num_d_blocks": [len(g) for g in blocks["d_blocks"]],
        "num_p_blocks": [len(g) for g in blocks["p_blocks"]],
    }

    def go() -> Outcome:
        trimmed = _apply(key, blocks["d_blocks"], blocks["p_blocks"])
        where = trimmed if isinstance(trimmed, dict) and "location" in trimmed else None
        more = [d > p for d, p in zip(observed["num_d_blocks"], observed["num_p_blocks"], strict=False)]
        if any(more):
            return held(
                False,
                observed,
                "D's worker got more blocks than P sent (the extra one is never written)",
                where,
            )
        return held(True, observed)

    out = attempt(go)
    out["observed"] = observed
    return out


def run(ctx: Ctx, key: str, vllm_name: str) -> dict[str, Any]:
    if key not in WORKERS:
        raise NotApplicable(f"the worker half is the NIXL pull worker's _apply_prefix_caching, not {key}'s")
    return {
        "recipe": _run(ctx, key, vllm_name, append=True),
        "control": _run(ctx, key, vllm_name, append=False),
    }
