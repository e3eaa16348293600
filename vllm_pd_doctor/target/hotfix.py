"""Opt-in runtime backport of the vLLM #53514 fix (PD_DOCTOR_HOTFIX=53514). Stdlib + vLLM only.

On releases whose P side truncates a hybrid/Mamba prompt in `get_num_new_matched_tokens` (after the
scheduler's local prefix-cache lookup), truncate it in `on_new_request` instead (before any
lookup), through the release's OWN truncation helper, and let the late call find the request
already truncated (the release's `_p_side_truncated` guard; where a release has none, one is
added around its helper). Everything is read from the installed code: the connector classes
from vLLM's connector factory registry (names from pd-doctor's registry), the scheduler half
from the connector's `__init__`, the helper and its callers, the condition around the late
call and the guard from the methods' source (`inspect` + `ast`). No version strings.

A release that already truncates in `on_new_request` is left alone ("not needed"). A class
whose helper or late call does not have the expected shape is refused, with the reason.
`apply()` is idempotent (markers on the patched functions) and logs ONE line naming what it
patched. `register()` is the `vllm.general_plugins` entry point: inert unless the engine's
environment holds PD_DOCTOR_HOTFIX=53514; then it patches in the first process that builds a
`Scheduler` (the EngineCore), before that scheduler creates its connector.
"""

from __future__ import annotations

import ast
import inspect
import json
import logging
import os
import sys
import textwrap
from typing import Any

if __package__:
    from . import connectors
else:  # pragma: no cover - run as a plain script
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import connectors  # type: ignore[no-redef]

ENV = "PD_DOCTOR_HOTFIX"
ISSUE = "53514"
MARK = "_pd_doctor_hotfix"
GUARD_KEY = "_p_side_truncated"
"""Key of the guard pd-doctor adds where a release has none (the upstream fix's own key)."""

log = logging.getLogger("vllm.pd_doctor_hotfix")
_announced = False


def enabled(environ: dict[str, str] | None = None) -> bool:
    env = os.environ if environ is None else environ
    return env.get(ENV, "").strip() == ISSUE


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
        sig_params = _params(fn)
        if sig_params is None or len(sig_params) != 2:
            return out("refused", f"{helper} does not take exactly (self, request): {sig_params}")
        late_params = _params(late_fn) or []
        if (
            len(call.args) != 1
            or call.keywords
            or not isinstance(call.args[0], ast.Name)
            or len(late_params) < 2
            or call.args[0].id != late_params[1]
        ):
            return out("refused", f"{connectors.LATE_HOOK} does not call {helper} with its request alone")
        keys, flags = _condition(parents)
        if "do_remote_decode" not in keys or not flags:
            return out(
                "refused",
                f"cannot read which requests {connectors.LATE_HOOK} truncates "
                f"(condition keys {keys}, flags {flags})",
            )
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
            return out(
                "refused",
                f"{helper} has no guard and is also called from "
                f"{', '.join(others)}: adding one could change those paths",
            )
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


# ----------------------------------------------------------------------------- patching


def _early_wrapper(
    original: Any, attr: str | None, half_cls: Any, helper: str, keys: list[str], flags: list[str]
) -> Any:
    def on_new_request(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        half = getattr(self, attr, None) if attr else self
        if isinstance(half, half_cls):
            params = getattr(request, "kv_transfer_params", None)
            if (
                isinstance(params, dict)
                and all(params.get(k) for k in keys)
                and all(getattr(half, f, False) for f in flags)
            ):
                try:
                    getattr(half, helper)(request)
                except Exception as exc:  # never break the engine: the late call still runs
                    log.warning(
                        "pd-doctor hotfix %s: %s failed in %s (%r); the request keeps "
                        "the release's late truncation",
                        ISSUE,
                        helper,
                        connectors.EARLY_HOOK,
                        exc,
                    )
        return original(self, request, *args, **kwargs)

    setattr(on_new_request, MARK, True)
    on_new_request.__wrapped__ = original  # type: ignore[attr-defined]
    on_new_request.__qualname__ = getattr(original, "__qualname__", "on_new_request")
    return on_new_request


def _guarded_helper(original: Any) -> Any:
    def helper(self: Any, request: Any) -> Any:
        params = getattr(request, "kv_transfer_params", None)
        if isinstance(params, dict) and params.get(GUARD_KEY):
            return None
        before = getattr(request, "num_prompt_tokens", None)
        result = original(self, request)
        if isinstance(params, dict) and getattr(request, "num_prompt_tokens", None) != before:
            params[GUARD_KEY] = True
        return result

    setattr(helper, MARK, True)
    helper.__wrapped__ = original  # type: ignore[attr-defined]
    helper.__qualname__ = getattr(original, "__qualname__", "helper")
    return helper


def patch_class(entry: dict[str, Any], cls: Any) -> None:
    """Carry out one planned entry (status "patch") on `cls`; updates the entry's status."""
    attr, half = _scheduler_half(cls)
    current = getattr(cls, connectors.EARLY_HOOK)
    if getattr(current, MARK, False):
        entry["status"] = "already patched"
        return
    helper = entry["helper"]
    if entry["guard_source"] == "added" and not getattr(getattr(half, helper), MARK, False):
        setattr(half, helper, _guarded_helper(getattr(half, helper)))
    cond = entry["condition"]
    setattr(
        cls, connectors.EARLY_HOOK, _early_wrapper(current, attr, half, helper, cond["keys"], cond["flags"])
    )
    entry["status"] = "patched"


def apply(names: list[str] | None = None, *, announce: bool = True) -> list[dict[str, Any]]:
    """Patch every late-truncating connector class (of `names`, default all). Idempotent."""
    global _announced
    pairs = _plan(names)
    for e, cls in pairs:
        if e["status"] == "patch":
            patch_class(e, cls)
    entries = [e for e, _ in pairs]
    if announce and (not _announced or any(e["status"] == "patched" for e in entries)):
        log.warning("%s", summary_line(entries))  # one line per process (more if it patched)
        _announced = True
    return entries


def summary_line(entries: list[dict[str, Any]]) -> str:
    parts = []
    for e in entries:
        if e["status"] in ("patched", "already patched"):
            parts.append(
                f"{e['status']} {e['class']}.{e['hook']} -> "
                f"{e['scheduler_class']}.{e['helper']} ({e['helper_at']}, guard "
                f"{e['guard']} {e['guard_source']}; late call {e['late_call_at']} "
                "now a no-op)"
            )
        elif e["status"] == "not needed":
            parts.append(f"not needed for {e['class']}: {e['reason']}")
        elif e["status"] == "refused":
            parts.append(f"REFUSED {e['class']}: {e['reason']}")
    if not parts:
        parts.append("nothing to patch (no late-truncating P/D connector here)")
    return f"pd-doctor hotfix {ISSUE}: " + "; ".join(parts)


# ----------------------------------------------------------------------------- plugin


def _configured_names(vllm_config: Any) -> list[str] | None:
    ktc = getattr(vllm_config, "kv_transfer_config", None)
    name = getattr(ktc, "kv_connector", None)
    if ktc is None or not name:
        return []
    return [name] if connectors.by_vllm_name(str(name)) is not None else None


def register() -> None:
    """Entry point (vllm.general_plugins). Inert unless PD_DOCTOR_HOTFIX=53514."""
    if not enabled():
        return
    try:
        from vllm.v1.core.sched.scheduler import Scheduler
    except Exception as exc:  # pragma: no cover - layout drift
        log.warning("pd-doctor hotfix %s: cannot import Scheduler (%r); not applied", ISSUE, exc)
        return
    if getattr(Scheduler.__init__, MARK, False):
        return
    original_init = Scheduler.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        vllm_config = kwargs.get("vllm_config", args[0] if args else None)
        try:
            names = _configured_names(vllm_config)
            if names != []:
                apply(names)
        except Exception as exc:  # never break the engine
            log.warning("pd-doctor hotfix %s: not applied: %r", ISSUE, exc)
        original_init(self, *args, **kwargs)

    setattr(__init__, MARK, True)
    __init__.__wrapped__ = original_init  # type: ignore[attr-defined]
    Scheduler.__init__ = __init__  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> int:
    """`python -m ...hotfix --out FILE`: the plan for this vLLM as JSON (nothing patched)."""
    import argparse

    parser = argparse.ArgumentParser(description="pd-doctor hotfix plan")
    parser.add_argument("--out", required=True)
    ns = parser.parse_args(argv)
    doc: dict[str, Any] = {"issue": ISSUE}
    try:
        import vllm

        doc["vllm"] = {
            "version": str(getattr(vllm, "__version__", "?")),
            "path": os.path.dirname(os.path.abspath(vllm.__file__)),
        }
        doc["plan"] = plan()
    except Exception as exc:
        doc["error"] = f"{type(exc).__name__}: {exc}"
    with open(ns.out, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
