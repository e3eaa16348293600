"""notify-only-failure: a notification-only D request whose handshake fails (PR #57570).

A D-side request aborted before it was scheduled still holds P's blocks, so the NIXL connector's
scheduler half (`request_finished`) queues it for its worker with no local blocks: the worker only
notifies P to free them. vLLM has already removed the request. When the worker's background handshake
with P fails, releases whose `start_load_kv` records every entry in `_recving_metadata` (0.27.1,
0.28.0) report it as a failed receive (`finished_recving`) and the scheduler, which no longer has the
request, asserts `req_id in self.requests`; releases that record only entries awaiting KV or with
local blocks (`meta.awaiting_kvs or any(meta.local_block_ids)`, 0.32.0) drop the failure.

The recipe runs vLLM's real D scheduler and connector scheduler half (the metadata is the one its
`build_connector_meta` hands the worker), vLLM's real pull worker `start_load_kv` and `get_finished`,
and feeds their report to the scheduler's `update_from_output` as the model runner does. The worker is
built without its `__init__` (which needs the NIXL library and a device), as in lease_reaper; its
handshake executor is a stand-in whose future fails as a failed `_nixl_handshake` does (it raises):
the worker's own done callbacks decide what is reported. The control: a normal remote-read request,
still waiting for its KV, whose handshake fails the same way (a failed receive the scheduler has).
"""

from __future__ import annotations

import collections
import queue
import threading
from concurrent.futures import Future
from typing import Any

from .. import drive, triggers
from .common import Ctx, NotApplicable, Outcome, attempt, held, init_bookkeeping, kv_output, prefill_params

KV_ROLE = "kv_consumer"
NIXL = "vllm.distributed.kv_transfer.kv_connector.v1.nixl"
WORKERS = {"nixl": [(f"{NIXL}.pull_worker", "NixlPullConnectorWorker")]}
BLOCKS = 2


class _Executor:
    """Stand-in for the worker's handshake executor: the futures it hands out are failed later, as a
    `_nixl_handshake` that cannot reach P fails in the background thread."""

    def __init__(self) -> None:
        self.futures: list[Future[Any]] = []

    def submit(self, _fn: Any, *_args: Any, **_kw: Any) -> Future[Any]:
        fut: Future[Any] = Future()
        self.futures.append(fut)
        return fut

    def fail_all(self) -> int:
        n = 0
        for fut in self.futures:
            if not fut.done():
                fut.set_exception(TimeoutError("pd-doctor: handshake with the prefill engine timed out"))
                n += 1
        return n


class _Agent:
    """Stand-in for the NIXL agent: no notifications arrive."""

    def get_new_notifs(self) -> dict[str, list[bytes]]:
        return {}


def _bookkeeping() -> dict[str, Any]:
    """The state the worker's `__init__` sets that start_load_kv/get_finished read (nothing in flight)."""
    return {
        "transfer_topo": object(),
        "nixl_wrapper": _Agent(),
        "engine_id": "pd-doctor-decode",
        "tp_rank": 0,
        "_hb_handshake_notif_only": False,
        "pcp_rank": 0,
        "pcp_dcp_sharded": False,
        "use_host_buffer": False,
        "use_mla": False,
        "_has_mamba": False,
        "_physical_blocks_per_logical_kv_block": 1,
        "_engine_ttl": 0,
        "_handshake_initiation_executor": _Executor(),
        "_ready_requests": queue.Queue(),
        "_reqs_to_send": {},
        "_reqs_to_process": set(),
        "consumer_notification_counts_by_req": collections.defaultdict(int),
        "expected_consumer_notifications_by_req": {},
        "_recving_transfers": {},
        "_recving_metadata": {},
        "_failed_recv_reqs": queue.Queue(),
        "_invalid_block_ids": queue.Queue(),
        "_recv_failures": set(),
        "_replicated_pcp_done_sending": set(),
        "_pending_recv_notifs": {},
        "_handshake_lock": threading.RLock(),
        "_handshake_futures": {},
        "_remote_agents": {},
        "_engine_by_address": {},
        "_engine_last_active": {},
        "_engine_clock_offset": {},
        "_failed_remote_engines": set(),
        "_invalid_remote_engines": set(),
    }


def _hma_required(sched: Any) -> bool:
    """The worker's `_is_hma_required`, as its `__init__` derives it from the engine's KV cache layout
    (any group not full attention, with the hybrid KV cache manager on). It decides whether the
    worker's failure path reaches `_failed_recv_reqs` for an entry with no local blocks."""
    full = drive.import_first(
        "import FullAttentionSpec", [("vllm.v1.kv_cache_interface", "FullAttentionSpec")]
    )
    if sched.vllm_config.scheduler_config.disable_hybrid_kv_cache_manager:
        return False
    return any(not isinstance(g.kv_cache_spec, full) for g in sched.kv_cache_config.kv_cache_groups)


def _worker(key: str, sched: Any) -> Any:
    if key not in WORKERS:
        raise NotApplicable(f"the recipe drives the pull-mode NIXL worker only, not {key}'s")
    cls = drive.import_first("import the NIXL worker", WORKERS[key])
    stats = drive.import_first("import the NIXL worker", [(f"{NIXL}.base_worker", "NixlKVConnectorStats")])
    worker = object.__new__(cls)
    for name, value in init_bookkeeping(cls).items():
        setattr(worker, name, value)
    for name, value in _bookkeeping().items():
        setattr(worker, name, value)
    worker.xfer_stats = stats()
    worker._is_hma_required = _hma_required(sched)
    return worker


def _report(worker: Any) -> Any:
    """What the model runner hands the scheduler from the worker (its KVConnectorOutput)."""
    sets: dict[str, Any] = {}
    if hasattr(worker, "get_transfer_results"):
        res = worker.get_transfer_results()
        sets.update(finished_sending=set(res.finished_sending), finished_recving=set(res.finished_recving))
        sets["failed_recving"] = set(getattr(res, "failed_recving", ()) or ())
    else:
        done_sending, done_recving = worker.get_finished()
        sets.update(finished_sending=set(done_sending), finished_recving=set(done_recving))
    errors = getattr(worker, "get_block_ids_with_load_errors", None)
    if callable(errors):
        sets["invalid_block_ids"] = set(errors())
    return sets


def _worker_half(sched: Any, worker: Any, rid: str, observed: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Schedule, then the worker's half as vLLM runs it; the handshake fails meanwhile. vLLM's worker
    raises nothing here on any release, so a raise means the worker pd-doctor built lacks something."""
    so = sched.schedule()
    meta = so.kv_connector_metadata
    entry = getattr(meta, "reqs_to_recv", {}).get(rid)
    observed["worker_entry"] = (
        None
        if entry is None
        else {
            "local_block_ids": [list(g) for g in (entry.local_block_ids or [])],
            "awaiting_kvs": getattr(entry, "awaiting_kvs", None),
        }
    )
    if entry is None:
        raise NotApplicable("the connector's scheduler half handed its worker no entry for the request")
    try:
        worker.start_load_kv(meta)
        observed["handshakes_failed"] = worker._handshake_initiation_executor.fail_all()
        sets = _report(worker)
    except Exception as exc:
        raise drive.InternalsError(
            "drive the NIXL worker's receive bookkeeping", f"{type(exc).__name__}: {exc}"
        ) from exc
    observed["report"] = {k: sorted(v) for k, v in sets.items()}
    observed["recving_metadata_left"] = sorted(worker._recving_metadata)
    observed["in_scheduler_when_reported"] = rid in sched.requests
    return so, sets


def _run(ctx: Ctx, key: str, vllm_name: str, abort: bool) -> Outcome:
    sched, rf = ctx.scheduler(vllm_name, KV_ROLE)
    worker = _worker(key, sched)
    rid = "notify-only-" + ("aborted" if abort else "awaiting")
    prompt = triggers.prompt_tokens(BLOCKS * int(sched.block_size), ctx.vocab())
    req = rf.make(rid, prompt, prefill_params(ctx, vllm_name, prompt, rid))
    sched.add_request(req)
    if abort:  # aborted before scheduling: the connector keeps a notify-only entry for P's blocks
        from vllm.v1.request import RequestStatus

        sched.finish_requests(rid, RequestStatus.FINISHED_ABORTED)
    observed: dict[str, Any] = {"aborted_before_scheduling": abort, "hma": worker._is_hma_required}

    def go() -> Outcome:
        so, sets = _worker_half(sched, worker, rid, observed)
        mro = drive.fabricate_model_output(sched, so, token=7)
        mro.kv_connector_output = kv_output(**sets)
        sched.update_from_output(so, mro)  # where a release asserts on the report
        observed["in_scheduler_after"] = rid in sched.requests
        reported = rid in observed["report"].get("finished_recving", [])
        if reported and not observed["in_scheduler_when_reported"]:
            return held(
                False, observed, "a failed receive was reported for a request the scheduler no longer has"
            )
        if not observed.get("handshakes_failed"):
            raise drive.InternalsError("fail the handshake", "the worker started no handshake with P")
        return held(True, observed)

    try:
        return attempt(go)
    finally:
        worker.__dict__.clear()  # nothing for vLLM's __del__ to shut down


def run(ctx: Ctx, key: str, vllm_name: str) -> dict[str, Any]:
    return {
        "recipe": _run(ctx, key, vllm_name, abort=True),
        "control": _run(ctx, key, vllm_name, abort=False),
    }
