"""The hybrid-load-failure hotfix (vllm#45474, the shape of merged PR #50388). Stdlib + vLLM.

Where `Scheduler._update_requests_with_invalid_blocks` unpacks ONE KV cache group
(`(req_block_ids,) = self.kv_cache_manager.get_block_ids(req_id)`) and no caller stops a layout with
several groups first, the method is wrapped: with one group the release's own code runs untouched;
with several, a request with an invalid (non-null) block among any group's externally computed blocks
recomputes in full (its groups sit on different block grids: there is no one valid prefix to keep),
with the release's own result shape and its rule for a block another request already recomputes.
"not needed" where a caller stops multi-group layouts before the unpack or the method reads every
group; refused where its parameters or result cannot be read.
"""

from __future__ import annotations

import ast
import inspect
from typing import Any

from . import hotfix_source as src

INVALID = "_update_requests_with_invalid_blocks"


def _single_group_unpack(fn: ast.FunctionDef) -> ast.Assign | None:
    """`(x,) = self.kv_cache_manager.get_block_ids(...)`: one group taken from a per-group list."""
    for n in ast.walk(fn):
        if (
            isinstance(n, ast.Assign)
            and len(n.targets) == 1
            and isinstance(n.targets[0], (ast.Tuple, ast.List))
            and len(n.targets[0].elts) == 1
            and isinstance(n.value, ast.Call)
            and isinstance(n.value.func, ast.Attribute)
            and n.value.func.attr == "get_block_ids"
            and src.is_self_attr(n.value.func.value, "kv_cache_manager")
        ):
            return n
    return None


def _group_guard(caller: ast.FunctionDef, before: int) -> ast.If | None:
    """An `if` on the number of KV cache groups, before line `before`, that raises or returns."""
    for n in ast.walk(caller):
        if not (isinstance(n, ast.If) and n.lineno < before):
            continue
        on_groups = any(
            isinstance(a, ast.Attribute) and a.attr == "kv_cache_groups" for a in ast.walk(n.test)
        )
        leaves = any(isinstance(s, (ast.Raise, ast.Return)) for b in n.body for s in ast.walk(b))
        if on_groups and leaves:
            return n
    return None


def _roles(fn: ast.FunctionDef, unpack: ast.Assign) -> dict[str, str] | None:
    """The method's parameters by role, read from its body: the requests it loops over, the invalid
    block ids it tests membership in, the scheduled-token map it `.get`s, and the eviction flag."""
    params = src.params(fn)
    loop = next(
        (
            n
            for n in ast.walk(fn)
            if isinstance(n, ast.For)
            and isinstance(n.iter, ast.Name)
            and any(s is unpack for s in ast.walk(n))
        ),
        None,
    )
    invalid = {
        c.id
        for n in ast.walk(fn)
        if isinstance(n, ast.Compare) and any(isinstance(o, (ast.In, ast.NotIn)) for o in n.ops)
        for c in n.comparators
        if isinstance(c, ast.Name) and c.id in params
    }
    scheduled = {
        n.func.value.id
        for n in ast.walk(fn)
        if isinstance(n, ast.Call)
        and isinstance(n.func, ast.Attribute)
        and n.func.attr == "get"
        and isinstance(n.func.value, ast.Name)
        and n.func.value.id in params
    }
    if loop is None or not isinstance(loop.iter, ast.Name) or loop.iter.id not in params:
        return None
    if len(invalid) != 1 or len(scheduled) != 1:
        return None
    roles = {"requests": loop.iter.id, "invalid": invalid.pop(), "scheduled": scheduled.pop()}
    evict = [p for p in params if "evict" in p]
    if evict:
        roles["evict"] = evict[0]
    return roles


def _returns_triple(fn: ast.FunctionDef) -> bool:
    rets = [n for n in ast.walk(fn) if isinstance(n, ast.Return)]
    return bool(rets) and all(isinstance(r.value, ast.Tuple) and len(r.value.elts) == 3 for r in rets)


def plan(cs: src.ClassSource) -> dict[str, Any]:
    fn = cs.methods.get(INVALID)
    e = src.entry("hybrid-load-failure", cs, INVALID, fn)
    if fn is None:
        return src.out(e, "refused", f"{src.CLASS} has no {INVALID} here")
    unpack = _single_group_unpack(fn)
    if unpack is None:
        reads = any(isinstance(n, ast.Attribute) and n.attr == "get_block_ids" for n in ast.walk(fn))
        if reads:
            return src.out(e, "not needed", f"{INVALID} reads the block ids of every KV cache group")
        return src.out(e, "refused", f"{INVALID} does not read the request's block ids: unexpected shape")
    e["sites"] = [cs.at(unpack)]
    callers = [(m, c) for m in cs.methods.values() for c in src.self_calls(m, INVALID)]
    guards = [(m, g) for m, c in callers if (g := _group_guard(m, c.lineno)) is not None]
    if callers and len(guards) == len(callers):
        m, g = guards[0]
        also = (
            " (failed loads of such layouts take the failed_recving path)"
            if _mentions(cs, "failed_recving")
            else ""
        )
        return src.out(
            e,
            "not needed",
            f"{src.CLASS}.{m.name} stops a layout with several KV cache groups ({cs.at(g)}) before the "
            f"single-group unpack in {INVALID} ({cs.at(unpack)}){also}",
        )
    roles = _roles(fn, unpack)
    if roles is None or not _returns_triple(fn):
        return src.out(
            e, "refused", f"cannot read {INVALID}'s parameters or its 3-tuple result: unexpected shape"
        )
    e["roles"] = roles
    return src.out(
        e,
        "patch",
        f"{INVALID} unpacks one KV cache group from get_block_ids ({cs.at(unpack)}): a failed load of a "
        "request with several groups raises ValueError (too many values to unpack) and kills EngineCore",
    )


def _mentions(cs: src.ClassSource, attr: str) -> bool:
    return cs.node is not None and any(
        isinstance(n, ast.Attribute) and n.attr == attr for n in ast.walk(cs.node)
    )


def _null_block_id(sched: Any) -> Any:
    pool = getattr(sched.kv_cache_manager, "block_pool", None)
    return getattr(getattr(pool, "null_block", None), "block_id", None)


def _group_block_sizes(sched: Any, n: int) -> list[int]:
    groups = list(getattr(getattr(sched, "kv_cache_config", None), "kv_cache_groups", ()) or ())
    sizes = [int(getattr(getattr(g, "kv_cache_spec", None), "block_size", 0) or 0) for g in groups]
    default = int(getattr(sched, "block_size", 0) or 0)
    return [s or default for s in sizes] if len(sizes) == n else [default] * n


def recompute_in_full(
    sched: Any, requests: Any, invalid: set[int], scheduled: dict[str, int], evict: bool
) -> tuple[set[str], int, set[int]]:
    """Several KV cache groups: a request with an invalid block among any group's externally computed
    blocks recomputes from its first token (the release's rule for a block another request of the
    batch already recomputes is kept: it reverts to its computed tokens). The release's result shape:
    (affected request ids, tokens to recompute, block ids to evict)."""
    affected: set[str] = set()
    total = 0
    to_evict: set[int] = set()
    marked: set[int] = set()
    null = _null_block_id(sched)
    for request in requests:
        rid = request.request_id
        computed = request.num_computed_tokens - scheduled.get(rid, 0)
        per_group = [list(g) for g in sched.kv_cache_manager.get_block_ids(rid)]
        sizes = _group_block_sizes(sched, len(per_group))
        loaded = [
            b
            for blocks, bs in zip(per_group, sizes, strict=True)
            for b in (blocks[: -(-computed // bs)] if bs > 0 else blocks)
            if b != null
        ]
        bad = [b for b in loaded if b in invalid]
        if not bad:
            continue
        affected.add(rid)
        if any(b not in marked for b in bad):
            marked.update(bad)
            total += computed
            request.num_computed_tokens = 0
            if evict:
                to_evict.update(b for blocks in per_group for b in blocks if b != null)
        else:  # every bad block is recomputed by an earlier request of this batch (release's rule)
            total += request.num_computed_tokens - computed
            request.num_computed_tokens = computed
    return affected, total, to_evict


def wrapper(original: Any, roles: dict[str, str]) -> Any:
    sig = inspect.signature(original)

    def patched(self: Any, *args: Any, **kwargs: Any) -> Any:
        groups = getattr(getattr(self, "kv_cache_config", None), "kv_cache_groups", None) or ()
        if len(groups) <= 1:
            return original(self, *args, **kwargs)
        bound = sig.bind(self, *args, **kwargs)
        bound.apply_defaults()
        a = bound.arguments
        evict = bool(a[roles["evict"]]) if "evict" in roles else True
        return recompute_in_full(
            self, a[roles["requests"]], a[roles["invalid"]], a[roles["scheduled"]], evict
        )

    patched.__wrapped__ = original  # type: ignore[attr-defined]
    patched.__qualname__ = original.__qualname__
    patched.__doc__ = original.__doc__
    return patched
