"""Where a release truncates P-side prompts, read from its code (the #53514 hotfix's plan).

Stdlib + vLLM only (runs inside vLLM, installed with the hotfix plugin). The connector classes come
from vLLM's connector factory registry (names from pd-doctor's registry); the scheduler half from
the connector's `__init__`; the truncation helper, the hooks that call it, the condition around
the late call and the helper's idempotence guard from the methods' source (`inspect` + `ast`).
Nothing is changed here; `hotfix.apply` carries out the plan.
"""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
from typing import Any

from . import connectors

GUARD_KEY = "_p_side_truncated"
"""Key of the guard pd-doctor adds where a release has none (the upstream fix's own key)."""


# ----------------------------------------------------------------------------- reading code


def _rel(path: str | None) -> str:
    norm = (path or "?").replace("\\", "/")
    idx = norm.rfind("/vllm/")
    return norm[idx + 1 :] if idx >= 0 else norm


def _where(fn: Any) -> str:
    try:
        fn = inspect.unwrap(fn)
        return f"{_rel(inspect.getsourcefile(fn))}:{inspect.getsourcelines(fn)[1]}"
    except (OSError, TypeError):
        return "?"


def _at(fn: Any, line: int) -> str:
    return f"{_where(fn).rsplit(':', 1)[0]}:{line}"


def _tree(fn: Any) -> tuple[ast.FunctionDef | ast.AsyncFunctionDef, int] | None:
    """The parsed def of a function and its first line in the file."""
    try:
        fn = inspect.unwrap(fn)
        lines, start = inspect.getsourcelines(fn)
        mod = ast.parse(textwrap.dedent("".join(lines)))
    except (OSError, TypeError, SyntaxError, ValueError):
        return None
    node = mod.body[0] if mod.body else None
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
        return node, start
    return None


def _self_calls(fn: Any, name: str) -> list[tuple[ast.Call, list[ast.AST], int]]:
    """Calls `self.<name>(...)` in `fn`: (call, enclosing nodes, file line)."""
    parsed = _tree(fn)
    if parsed is None:
        return []
    node, start = parsed
    found: list[tuple[ast.Call, list[ast.AST], int]] = []

    def visit(n: ast.AST, parents: list[ast.AST]) -> None:
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == name
            and isinstance(n.func.value, ast.Name)
            and n.func.value.id == "self"
        ):
            found.append((n, parents, start + n.lineno - 1))
        for child in ast.iter_child_nodes(n):
            visit(child, [*parents, n])

    visit(node, [])
    return found


def _delegates(fn: Any, attr: str, hook: str) -> bool:
    """Does `fn` call `self.<attr>.<hook>(...)`?"""
    parsed = _tree(fn)
    if parsed is None:
        return False
    for n in ast.walk(parsed[0]):
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == hook:
            v = n.func.value
            if (
                isinstance(v, ast.Attribute)
                and v.attr == attr
                and isinstance(v.value, ast.Name)
                and v.value.id == "self"
            ):
                return True
    return False


def _condition(parents: list[ast.AST]) -> tuple[list[str], list[str]]:
    """Keys read with `.get("k")` and `self.<flag>` attributes in the ifs around a call."""
    keys: list[str] = []
    flags: list[str] = []
    for p in parents:
        if not isinstance(p, ast.If):
            continue
        for n in ast.walk(p.test):
            if (
                isinstance(n, ast.Call)
                and isinstance(n.func, ast.Attribute)
                and n.func.attr == "get"
                and n.args
                and isinstance(n.args[0], ast.Constant)
                and isinstance(n.args[0].value, str)
            ):
                keys.append(n.args[0].value)
            elif isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self":
                flags.append(n.attr)
    return list(dict.fromkeys(keys)), list(dict.fromkeys(flags))


def _guard(helper: Any) -> str | None:
    """The key the helper both tests and sets to True (its idempotence guard), if any."""
    parsed = _tree(helper)
    if parsed is None:
        return None
    read: set[str] = set()
    written: set[str] = set()
    for n in ast.walk(parsed[0]):
        if (
            isinstance(n, ast.Call)
            and isinstance(n.func, ast.Attribute)
            and n.func.attr == "get"
            and n.args
            and isinstance(n.args[0], ast.Constant)
        ):
            read.add(str(n.args[0].value))
        elif (
            isinstance(n, ast.Compare)
            and isinstance(n.left, ast.Constant)
            and any(isinstance(o, (ast.In, ast.NotIn)) for o in n.ops)
        ):
            read.add(str(n.left.value))
        elif isinstance(n, ast.Assign):
            for t in n.targets:
                if isinstance(t, ast.Subscript) and isinstance(t.slice, ast.Constant):
                    written.add(str(t.slice.value))
    both = sorted(read & written)
    return both[0] if both else None


def _helpers(cls: Any) -> list[str]:
    return [n for n in dir(cls) if connectors.is_truncation_helper(n) and callable(getattr(cls, n, None))]


def _scheduler_half(cls: Any) -> tuple[str | None, Any]:
    """(attribute, class) of the connector's scheduler half: the class holding a truncation
    helper that `__init__` assigns to `self.<attribute>`; (None, cls) when it is the class."""
    if _helpers(cls):
        return None, cls
    for klass in inspect.getmro(cls):
        init = klass.__dict__.get("__init__")
        parsed = _tree(init) if init is not None else None
        if parsed is None:
            continue
        glb = getattr(sys.modules.get(klass.__module__), "__dict__", {})
        for n in ast.walk(parsed[0]):
            target = (
                n.targets[0]
                if isinstance(n, ast.Assign) and len(n.targets) == 1
                else n.target
                if isinstance(n, ast.AnnAssign)
                else None
            )
            value = getattr(n, "value", None)
            if not (
                isinstance(target, ast.Attribute)
                and isinstance(target.value, ast.Name)
                and target.value.id == "self"
                and isinstance(value, ast.Call)
                and isinstance(value.func, ast.Name)
            ):
                continue
            half = glb.get(value.func.id)
            if inspect.isclass(half) and _helpers(half):
                return target.attr, half
    return None, None


# ----------------------------------------------------------------------------- the plan


def plan_class(key: str, vllm_name: str, cls: Any) -> dict[str, Any]:
    """What the hotfix would do to one connector class (nothing is changed here)."""
    entry: dict[str, Any] = {
        "connector": key,
        "kv_connector": vllm_name,
        "class": cls.__qualname__,
        "hook": connectors.EARLY_HOOK,
    }

    def out(status: str, reason: str) -> dict[str, Any]:
        entry.update(status=status, reason=reason)
        return entry

    attr, half = _scheduler_half(cls)
    if half is None:
        return out("no truncation", "no scheduler half with a P-side truncation helper")
    entry["scheduler_class"] = half.__qualname__
    entry["scheduler_attr"] = attr
    early_fn = getattr(cls, connectors.EARLY_HOOK, None)
    late_fn = getattr(half, connectors.LATE_HOOK, None)
    for helper in _helpers(half):
        fn = getattr(half, helper)
        early = _self_calls(early_fn, helper) if attr is None else []
        if attr is not None and _delegates(early_fn, attr, connectors.EARLY_HOOK):
            early = _self_calls(getattr(half, connectors.EARLY_HOOK, None), helper)
        late = _self_calls(late_fn, helper)
        if early:
            where = early_fn if attr is None else getattr(half, connectors.EARLY_HOOK)
            entry.update(helper=helper, helper_at=_where(fn), early_call_at=_at(where, early[0][2]))
            return out(
                "not needed",
                f"{half.__qualname__}.{connectors.EARLY_HOOK} already calls {helper} before the lookup",
            )
        if not late:
            continue
        call, parents, line = late[0]
        entry.update(helper=helper, helper_at=_where(fn), late_call_at=_at(late_fn, line))
        refused = _call_refusal(fn, helper, call, late_fn)
        if refused is not None:
            return out("refused", refused)
        refused, keys, flags, guard = _condition_refusal(half, fn, helper, parents)
        if refused is not None:
            return out("refused", refused)
        if early_fn is None or (attr is not None and not hasattr(cls, connectors.EARLY_HOOK)):
            return out("refused", f"{cls.__qualname__} has no {connectors.EARLY_HOOK}")
        entry.update(
            condition={"keys": keys, "flags": flags},
            guard=guard or GUARD_KEY,
            guard_source="release" if guard else "added",
        )
        return out(
            "patch",
            f"{half.__qualname__}.{connectors.LATE_HOOK} calls {helper} after the local prefix-cache lookup",
        )
    return out("no truncation", f"no hook of {half.__qualname__} calls a truncation helper")


def _call_refusal(fn: Any, helper: str, call: ast.Call, late_fn: Any) -> str | None:
    """Why the late hook's call of `helper` cannot be moved before the lookup (None: it can)."""
    sig_params = _params(fn)
    if sig_params is None or len(sig_params) != 2:
        return f"{helper} does not take exactly (self, request): {sig_params}"
    late_params = _params(late_fn) or []
    if (
        len(call.args) != 1
        or call.keywords
        or not isinstance(call.args[0], ast.Name)
        or len(late_params) < 2
        or call.args[0].id != late_params[1]
    ):
        return f"{connectors.LATE_HOOK} does not call {helper} with its request alone"
    return None


def _condition_refusal(
    half: Any, fn: Any, helper: str, parents: list[ast.AST]
) -> tuple[str | None, list[str], list[str], str | None]:
    """Which requests the late hook truncates, and the helper's guard: (why not, keys, flags,
    guard)."""
    keys, flags = _condition(parents)
    if "do_remote_decode" not in keys or not flags:
        why = (
            f"cannot read which requests {connectors.LATE_HOOK} truncates "
            f"(condition keys {keys}, flags {flags})"
        )
        return why, keys, flags, None
    others = [
        h
        for h in (
            connectors.EARLY_HOOK,
            "update_state_after_alloc",
            "request_finished",
            "build_connector_meta",
        )
        if _self_calls(getattr(half, h, None), helper)
    ]
    guard = _guard(fn)
    if guard is None and others:
        why = (
            f"{helper} has no guard and is also called from "
            f"{', '.join(others)}: adding one could change those paths"
        )
        return why, keys, flags, None
    return None, keys, flags, guard


def _params(fn: Any) -> list[str] | None:
    try:
        return list(inspect.signature(inspect.unwrap(fn)).parameters)
    except (TypeError, ValueError):
        return None


def connector_classes(names: list[str] | None = None) -> list[tuple[str, str, Any, str | None]]:
    """(key, vLLM name, class or None, why not) for each registry connector vLLM registers."""
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    registry = getattr(KVConnectorFactory, "_registry", {})
    found: list[tuple[str, str, Any, str | None]] = []
    for c in connectors.all_connectors():
        for name in c.vllm_names:
            if name not in registry or (names is not None and name not in names):
                continue
            try:
                cls = registry[name]()
            except Exception as exc:
                found.append((c.key, name, None, f"cannot load it: {type(exc).__name__}: {exc}"))
                continue
            found.append((c.key, name, cls, None))
    return found


def _plan(names: list[str] | None) -> list[tuple[dict[str, Any], Any]]:
    out: list[tuple[dict[str, Any], Any]] = []
    seen: dict[int, dict[str, Any]] = {}
    for key, name, cls, why in connector_classes(names):
        if cls is None:
            out.append(
                (
                    {
                        "connector": key,
                        "kv_connector": name,
                        "kv_connectors": [name],
                        "status": "unavailable",
                        "reason": why,
                    },
                    None,
                )
            )
        elif id(cls) in seen:  # another name of the same class (NixlConnector, NixlPullConnector)
            seen[id(cls)]["kv_connectors"].append(name)
        else:
            entry = plan_class(key, name, cls)
            entry["kv_connectors"] = [name]
            seen[id(cls)] = entry
            out.append((entry, cls))
    return out


def plan(names: list[str] | None = None) -> list[dict[str, Any]]:
    """What `apply(names)` would do, per connector class (nothing is changed)."""
    return [e for e, _ in _plan(names)]
