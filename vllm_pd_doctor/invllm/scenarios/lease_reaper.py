"""lease-reaper: expired KV leases stranded behind a heartbeated head entry (vllm#58222).

P keeps a finished prefill's blocks under a lease (`_reqs_to_send`: request -> expiry, in grant
order) until D reads them or the lease expires; D's heartbeats ("HB:<ids>" notifications) extend a
lease in place. Releases whose reaper in the worker's `get_finished` walks that dict from its head
and stops at the first live entry never reach the expired leases behind a heartbeated head: their
blocks stay held (not in `finished_sending`) for as long as the head is kept alive.

The recipe runs vLLM's own NIXL worker code on the P side with a fake clock (as vLLM's heartbeat
tests do): three leases granted in order, D heartbeats the first one through the real
`_get_new_notifs` -> `_handle_heartbeat`, then the clock passes the other two leases' expiry and
the real `get_finished` runs. The worker is built without its `__init__` (which needs the NIXL
library and a device): only the bookkeeping `get_finished` reads is set, and the NIXL agent is a
stand-in that hands over the queued notifications. The control sends no heartbeat: every lease
expires and all must be reclaimed. The invariant: every expired lease is reported finished. vLLM
raises nothing here, so an exception means the stand-in worker lacks something: could not run.
"""

from __future__ import annotations

import collections
import importlib
import queue
import threading
import types
from typing import Any

from .. import drive
from .common import Ctx, NotApplicable, Outcome, held, init_bookkeeping, statement_in

NIXL = "vllm.distributed.kv_transfer.kv_connector.v1.nixl"
WORKERS = {
    "nixl": [(f"{NIXL}.pull_worker", "NixlPullConnectorWorker")],
    "nixl-push": [(f"{NIXL}.push_worker", "NixlPushConnectorWorker")],
}
"""The P-side worker per connector (push mode's own get_finished, where a release has one, wraps the
same reaper and wakes its writer thread: an Event the stand-in worker gets from its `__init__`)."""
BASE = f"{NIXL}.base_worker"
LEASE_S = 30.0
"""The P-side lease each request gets (vLLM's default kv_lease_duration)."""
LEASES = ("lease-head", "lease-1", "lease-2")


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def perf_counter(self) -> float:
        return self.now


class _Agent:
    """Stand-in for the NIXL agent: hands over the notifications queued for the next poll."""

    def __init__(self) -> None:
        self.queued: dict[str, list[bytes]] = {}

    def get_new_notifs(self) -> dict[str, list[bytes]]:
        out, self.queued = self.queued, {}
        return out

    def check_remote_metadata(self, _agent: Any) -> bool:
        return True


def _bookkeeping(lease_extension: int) -> dict[str, Any]:
    """The state the worker's `__init__` sets that `get_finished` reads (empty: nothing in flight)."""
    return {
        "transfer_topo": object(),
        "nixl_wrapper": _Agent(),
        "tp_rank": 0,
        "use_host_buffer": False,
        "use_mla": False,
        "_has_mamba": False,
        "enable_permute_local_kv": False,
        "enable_heterogeneous_attn_post_process": False,
        "_lease_extension": lease_extension,
        "_reqs_to_send": {},
        "_reqs_to_process": set(),
        "consumer_notification_counts_by_req": collections.defaultdict(int),
        "expected_consumer_notifications_by_req": {},
        "_recving_transfers": {},
        "_recving_metadata": {},
        "_failed_recv_reqs": queue.Queue(),
        "_recv_failures": set(),
        "_replicated_pcp_done_sending": set(),
        "_pending_recv_notifs": {},
        "_handshake_lock": threading.RLock(),
        "_handshake_futures": {},
        "_remote_agents": {},
        "_engine_by_address": {},
        "_failed_remote_engines": set(),
        "_invalid_remote_engines": set(),
    }


def _worker(key: str) -> tuple[Any, Any]:
    if key not in WORKERS:
        raise NotApplicable(f"the lease recipe drives the pull-mode NIXL worker only, not {key}'s")
    base = drive.import_first("import the NIXL worker", [(BASE, "NixlBaseConnectorWorker")])
    cls = drive.import_first("import the NIXL worker", WORKERS[key])
    if not hasattr(base, "_handle_heartbeat"):
        raise NotApplicable("this release's NIXL worker has no lease heartbeats (no _handle_heartbeat)")
    module = importlib.import_module(BASE)
    worker = object.__new__(cls)
    for name, value in init_bookkeeping(cls).items():
        setattr(worker, name, value)
    for name, value in _bookkeeping(int(LEASE_S * 2 // 3)).items():
        setattr(worker, name, value)
    worker.xfer_stats = module.NixlKVConnectorStats()
    return worker, module


def _run(key: str, heartbeat: bool) -> Outcome:
    worker, module = _worker(key)
    clock, real_time = _Clock(), module.time
    module.time = types.SimpleNamespace(perf_counter=clock.perf_counter)
    try:
        return _drive(worker, clock, heartbeat)
    except Exception as exc:  # the verdict is the invariant: a raise here is the worker pd-doctor built
        raise drive.InternalsError(
            "drive the NIXL worker's lease bookkeeping", f"{type(exc).__name__}: {exc}"
        ) from exc
    finally:
        module.time = real_time
        worker.__dict__.clear()  # nothing for vLLM's __del__ to shut down


def _inbox(cls: Any) -> str | None:
    """The queue the worker's `_get_new_notifs` drains instead of polling the NIXL agent itself
    (push mode: its writer thread owns the agent and forwards heartbeats there), read from the
    source: the attribute it calls `get_nowait` on; None when it polls the agent."""
    import ast
    import inspect
    import textwrap

    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(cls._get_new_notifs)))
    except (OSError, TypeError, SyntaxError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owner = node.func.value
            if node.func.attr == "get_nowait" and isinstance(owner, ast.Attribute):
                return owner.attr
    return None


def _deliver(worker: Any, notif: bytes) -> None:
    """D's notification, where this worker reads it: the NIXL agent's next poll, or the queue its
    writer thread forwards to."""
    inbox = _inbox(type(worker))
    if inbox is not None:
        getattr(worker, inbox).put(notif)
    else:
        worker.nixl_wrapper.queued = {"decode-agent": [notif]}


def _drive(worker: Any, clock: _Clock, heartbeat: bool) -> Outcome:
    for rid in LEASES:  # granted in order, as start_load_kv records metadata.reqs_to_send
        worker._reqs_to_send[rid] = clock.now + LEASE_S
        worker._reqs_to_process.add(rid)
    clock.now += LEASE_S - 5
    if heartbeat:  # D is still waiting on the head request: it heartbeats that one only
        _deliver(worker, f"HB:{LEASES[0]}".encode())
    first = set(worker.get_finished()[0])
    clock.now += 10  # past lease-1's and lease-2's expiry; the head's was extended (heartbeat)
    second = set(worker.get_finished()[0])
    left = dict(worker._reqs_to_send)
    expired = sorted(r for r in LEASES if r not in left or left[r] <= clock.now)
    stranded = sorted(r for r, exp in left.items() if exp <= clock.now)
    observed = {
        "heartbeat": LEASES[0] if heartbeat else None,
        "finished_sending_before_expiry": sorted(first),
        "finished_sending_after_expiry": sorted(second),
        "expired_leases": expired,
        "stranded_leases": stranded,
        "leases_left": {r: round(exp - clock.now, 1) for r, exp in left.items()},
    }
    if stranded:
        return held(
            False,
            observed,
            f"{len(stranded)} expired lease(s) never reclaimed ({', '.join(stranded)}): their blocks stay "
            "held behind the live head entry",
            _stop_statement(type(worker)),
        )
    return held(True, observed)


def _stop_statement(cls: Any) -> Outcome | None:
    """Where the reaper stops: the `break` under an `if` in a loop over the lease dict
    (`if now < expires: break` in the releases that strand), found from get_finished down."""
    import ast

    def stops(node: Any, parents: list[Any]) -> bool:
        if not (isinstance(node, ast.If) and any(isinstance(b, ast.Break) for b in node.body)):
            return False
        loops = [p for p in parents if isinstance(p, (ast.While, ast.For))]
        return bool(loops) and "_reqs_to_send" in ast.dump(loops[-1])

    return statement_in(cls, ("get_finished", "get_transfer_results"), stops)


def run(ctx: Ctx, key: str, vllm_name: str) -> dict[str, Any]:
    return {"recipe": _run(key, heartbeat=True), "control": _run(key, heartbeat=False)}
