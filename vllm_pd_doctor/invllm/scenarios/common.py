"""What every scenario recipe shares: schedulers per role, D-side requests, steps, outcomes.

Runs INSIDE the target vLLM interpreter (stdlib + vllm only). The scheduler, the connector's
scheduler half and the KV cache manager are vLLM's own (built by `kvconfig.Setup`); only the model
step is fabricated (`drive.fabricate_model_output`), and the worker's report of finished or failed
transfers is the `KVConnectorOutput` vLLM's worker would hand the scheduler. An outcome says what
vLLM itself did: an assertion or exception raised inside vLLM (its file:line), or an invariant
observed broken afterwards.
"""

from __future__ import annotations

import importlib
import traceback
from collections.abc import Callable
from typing import Any

from .. import drive, observe, triggers
from ..kvconfig import Setup

Outcome = dict[str, Any]
VLLM_DIR = "/vllm/"


class NotApplicable(Exception):
    """The scenario's code path does not exist here (said why); not a verdict either way."""


class Ctx:
    """One run's Setups (one per KV role, each built once) and the connector names present."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        self.model_dir = str(spec["model_dir"])
        """The model of the scenario running now (the runner sets it per scenario)."""
        self.setups: dict[str, Setup] = {}
        self._builds: dict[tuple[str, str], dict[Any, Any]] = {}
        self.registry: dict[str, Any] = {}

    def setup(self, kv_role: str) -> Setup:
        """The model's Setup (built once per model: its ModelConfig and layers do not depend on
        the role), with the builds (VllmConfig, KV cache groups) of `kv_role`."""
        s = self.setups.get(self.model_dir)
        if s is None:
            s = self.setups[self.model_dir] = Setup({**self.spec, "model_dir": self.model_dir})
        s.spec["kv_role"] = kv_role
        s._built = self._builds.setdefault((self.model_dir, kv_role), {})
        return s

    def scheduler(self, vllm_name: str, kv_role: str, budget: int = 2048) -> tuple[Any, Any]:
        """A fresh real Scheduler (empty prefix cache) and a request factory hashing like it."""
        return self.setup(kv_role).scheduler_factory(vllm_name)(budget)  # type: ignore[no-any-return]

    def vocab(self) -> int:
        return int(self.setup("kv_consumer").hf_config.get("vocab_size") or 512)


def remote_prefill_params(rid: str, num_blocks: int) -> dict[str, Any]:
    """kv_transfer_params a proxy hands a D-side request (the union of what the connectors read)."""
    return {
        "do_remote_prefill": True,
        "do_remote_decode": False,
        "remote_engine_id": "pd-doctor-prefill",
        "remote_block_ids": list(range(num_blocks)),
        "remote_host": "127.0.0.1",
        "remote_port": 5600,
        "remote_handshake_port": 5601,
        "remote_notify_port": 5602,
        "remote_bootstrap_addr": "127.0.0.1:8998",
        "remote_request_id": rid,
        "transfer_id": rid,
        "tp_size": 1,
    }


def kv_output(**sets: Any) -> Any:
    """vLLM's KVConnectorOutput with those of the given fields this release has."""
    cls = drive.import_first("import KVConnectorOutput", [("vllm.v1.outputs", "KVConnectorOutput")])
    return drive.construct("build KVConnectorOutput", cls, **sets)


def has_field(cls_path: tuple[str, str], name: str) -> bool:
    return name in drive.field_names(getattr(importlib.import_module(cls_path[0]), cls_path[1]))


def step(sched: Any, kv_connector_output: Any = None) -> Any:
    """One engine step: schedule, the fabricated model step (with the worker's KV report), update."""
    so = sched.schedule()
    mro = drive.fabricate_model_output(sched, so, token=7)
    if kv_connector_output is not None:
        mro.kv_connector_output = kv_connector_output
    return sched.update_from_output(so, mro)


def free_blocks(sched: Any) -> int | None:
    pool = getattr(sched.kv_cache_manager, "block_pool", None)
    fn = getattr(pool, "get_num_free_blocks", None)
    return int(fn()) if callable(fn) else None


def kv_params_of(outputs: Any, rid: str) -> dict[str, Any] | None:
    """The kv_transfer_params vLLM hands back with a finished request (`update_from_output`'s outputs)."""
    for eco in (outputs or {}).values():
        for o in getattr(eco, "outputs", ()) or ():
            if str(getattr(o, "request_id", "")) == rid and getattr(o, "kv_transfer_params", None):
                return dict(o.kv_transfer_params)
    return None


def prefill_params(ctx: Ctx, vllm_name: str, prompt: list[int], rid: str) -> dict[str, Any]:
    """What a proxy hands the D side for `prompt`: a kv_producer Scheduler runs the request
    (do_remote_decode) to its end and its connector's request_finished gives the params (a
    connector whose P side returns none, Mooncake's, is addressed by the proxy: the usual keys)."""
    sched, rf = ctx.scheduler(vllm_name, "kv_producer")
    proxy = remote_prefill_params(rid, -(-len(prompt) // int(sched.block_size)))
    # The proxy tells P about its peer too (MoRIIO's P side needs the peer's host and ports).
    req = rf.make(rid, prompt, {**proxy, "do_remote_prefill": False, "do_remote_decode": True})
    sched.add_request(req)
    sent: dict[str, Any] = {}
    for _ in range(8):
        sent = kv_params_of(step(sched), rid) or {}
        if sent or rid not in sched.requests:
            break
    return {**proxy, **sent, "do_remote_prefill": True, "do_remote_decode": False}


NO_WAIT = "so no transfer can finish after an abort"
"""Why abort-race needs the wait (its NotApplicable's reason); each recipe says its own."""


def add_waiting_d_request(
    ctx: Ctx, sched: Any, rf: Any, rid: str, blocks: int = 2, why: str = NO_WAIT
) -> Any:
    """A D-side request with the params the real P side sent for it, which the connector makes wait
    for remote KV (NotApplicable, ending with `why` the recipe needs the wait, if it does not)."""
    bs = int(sched.block_size)
    prompt = triggers.prompt_tokens(blocks * bs, ctx.vocab())
    params = prefill_params(ctx, _name(sched), prompt, rid)
    req = rf.make(rid, prompt, params)
    sched.add_request(req)
    step(sched)
    status = str(getattr(req.status, "name", req.status))
    if status != "WAITING_FOR_REMOTE_KVS":
        raise NotApplicable(
            f"the connector's scheduler half left the D request {status}: it never waited for remote KV "
            f"(a synchronous load, e.g. MoRIIO READ mode), {why}"
        )
    return req


def _name(sched: Any) -> str:
    return str(sched.vllm_config.kv_transfer_config.kv_connector)


def held(
    ok: bool, observed: dict[str, Any], invariant: str | None = None, where: Outcome | None = None
) -> Outcome:
    """An outcome where vLLM raised nothing; `invariant` names what was observed broken, if any, and
    `where` (from `statement_in`) the vLLM statement that broke it."""
    out: Outcome = {
        "failed": not ok,
        "how": None if ok else "invariant",
        "invariant": None if ok else invariant,
        "observed": observed,
    }
    if not ok and where:
        out.update(where)
    return out


def statement_in(
    cls: Any, methods: tuple[str, ...], match: Callable[[Any, list[Any]], bool]
) -> Outcome | None:
    """The first statement in these methods of `cls` (every definition along its MRO, then each
    method they use as `self.name`, breadth first) for which `match(node, parents)` holds,
    read by `ast` from vLLM's installed source: {location, function, statement}. The location of an
    invariant that vLLM breaks without raising (where a release's code stops or skips)."""
    seen: set[str] = set()
    todo = list(methods)
    while todo:
        name = todo.pop(0)
        if name in seen:
            continue
        seen.add(name)
        # every definition along the MRO (an override's `super().name()` runs the base's too)
        for fn in (k.__dict__[name] for k in cls.__mro__ if name in k.__dict__):
            hit = _statement(fn, name, match)
            if isinstance(hit, dict):
                return hit
            todo.extend(a for a in hit if callable(getattr(cls, a, None)) and a not in seen)
    return None


def _statement(fn: Any, name: str, match: Callable[[Any, list[Any]], bool]) -> Outcome | list[str]:
    """The matching statement of one function, or the `self.x` names it uses (to look in next)."""
    import ast
    import inspect

    try:
        lines, first = inspect.getsourcelines(fn)
        path = inspect.getsourcefile(fn) or ""
    except (OSError, TypeError):
        return []
    source = "".join(_dedent(lines))
    tree = ast.parse(source)
    hit = _find(tree, match)
    if hit is not None:
        seg = ast.get_source_segment(source, hit) or ""
        return {
            "location": f"{observe.vllm_relpath(path)}:{first + hit.lineno - 1}",
            "function": getattr(fn, "__qualname__", name),
            "statement": " ".join(x.strip() for x in seg.splitlines() if x.strip()),
        }
    return [
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
    ]


def _dedent(lines: list[str]) -> list[str]:
    import textwrap

    return textwrap.dedent("".join(lines)).splitlines(keepends=True)


def _find(tree: Any, match: Callable[[Any, list[Any]], bool]) -> Any:
    import ast

    stack: list[tuple[Any, list[Any]]] = [(tree, [])]
    while stack:
        node, parents = stack.pop(0)
        if node is not tree and match(node, parents):
            return node
        stack.extend((c, [*parents, node]) for c in ast.iter_child_nodes(node))
    return None


def attempt(fn: Callable[[], Outcome]) -> Outcome:
    """Run a recipe; an exception raised inside vLLM is its outcome (file:line), ours propagates."""
    try:
        return fn()
    except NotApplicable:
        raise
    except Exception as exc:
        tb = traceback.extract_tb(exc.__traceback__)
        if not tb or VLLM_DIR not in tb[-1].filename.replace("\\", "/"):
            raise
        loc = observe.exception_location(exc)
        return {
            "failed": True,
            "how": "assertion" if isinstance(exc, AssertionError) else "exception",
            "exception": type(exc).__name__,
            "message": str(exc) or None,
            "location": f"{loc['file']}:{loc['line']}" if loc else None,
            "function": loc["function"] if loc else None,
            "statement": loc["code"] if loc else None,
            "traceback": observe.format_exception(exc),
            "invariant": None,
            "observed": {},
        }


def init_bookkeeping(cls: Any) -> dict[str, Any]:
    """The empty bookkeeping a worker's `__init__` (and its bases') gives itself, read from the
    source: each `self.x = {}` / `set()` / `[]` / `queue.Queue()` / `defaultdict(...)` /
    `threading.RLock()` / constant. A worker built without its `__init__` (which needs the NIXL
    library) gets these first, so an attribute a newer release adds is there too."""
    import ast
    import collections
    import inspect
    import queue
    import textwrap
    import threading

    makers: dict[str, Callable[[], Any]] = {
        "set": set,
        "dict": dict,
        "list": list,
        "Queue": queue.Queue,
        "defaultdict": lambda: collections.defaultdict(int),
        "RLock": threading.RLock,
        "Lock": threading.Lock,
        "Event": threading.Event,
        "Condition": threading.Condition,
        "deque": collections.deque,
    }
    out: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        init = klass.__dict__.get("__init__")
        if init is None or not klass.__module__.startswith("vllm."):
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            target = node.targets[0] if isinstance(node, ast.Assign) and len(node.targets) == 1 else None
            target = node.target if isinstance(node, ast.AnnAssign) else target
            value = getattr(node, "value", None)
            if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)):
                continue
            if target.value.id != "self" or value is None:
                continue
            made = _empty(value, makers)
            if made is not _NOTHING:
                out[target.attr] = made
    return out


_NOTHING = object()


def _empty(value: Any, makers: dict[str, Callable[[], Any]]) -> Any:
    import ast
    import collections

    if isinstance(value, ast.Constant):
        return value.value
    if (
        isinstance(value, (ast.Dict, ast.List, ast.Set))
        and not getattr(value, "keys", None)
        and not getattr(value, "elts", None)
    ):
        return {} if isinstance(value, ast.Dict) else ([] if isinstance(value, ast.List) else set())
    if isinstance(value, ast.Call) and not value.keywords:
        name = _callee(value.func)
        if name == "defaultdict" and value.args:  # defaultdict(list), defaultdict[K, V](set)
            inner = makers.get(_callee(value.args[0]))
            return collections.defaultdict(inner if inner in (list, set, dict) else int)
        if name in makers and not value.args:
            return makers[name]()
    return _NOTHING


def _callee(fn: Any) -> str:
    """`queue.Queue` / `Queue` / `Queue[int]` / `defaultdict[K, V]` -> the called name."""
    import ast

    if isinstance(fn, ast.Subscript):  # a generic alias called: queue.Queue[T]()
        fn = fn.value
    return str(fn.attr if isinstance(fn, ast.Attribute) else (fn.id if isinstance(fn, ast.Name) else ""))
