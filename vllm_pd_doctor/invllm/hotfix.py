"""Opt-in runtime backport of the vLLM #53514 fix (PD_DOCTOR_HOTFIX=53514). Stdlib + vLLM only.

PD_DOCTOR_HOTFIX is a comma list of fix names (knowledge/facts/hotfixes.py): `53514` is this module's
connector patch; the Scheduler fixes (`hybrid-load-failure`, `abort-race`) are hotfix_scheduler.py's,
applied by the same plugin entry point at the same moment.

On releases whose P side truncates a hybrid/Mamba prompt in `get_num_new_matched_tokens` (after the
scheduler's local prefix-cache lookup), truncate it in `on_new_request` instead (before any
lookup), through the release's OWN truncation helper, and let the late call find the request
already truncated (the release's `_p_side_truncated` guard; where a release has none, one is
added around its helper). Everything is read from the installed code: the connector classes
from vLLM's connector factory registry (names from pd-doctor's registry), the scheduler half
from the connector's `__init__`, the helper and its callers, the condition around the late
call and the guard from the methods' source (`inspect` + `ast`, in hotfix_plan.py). No version
strings.

A release that already truncates in `on_new_request` is left alone ("not needed"). A class
whose helper or late call does not have the expected shape is refused, with the reason.
`apply()` is idempotent (markers on the patched functions) and logs ONE line naming what it
patched. `register()` is the `vllm.general_plugins` entry point: inert unless the engine's
environment holds PD_DOCTOR_HOTFIX=53514; then it patches in the first process that builds a
`Scheduler` (the EngineCore), before that scheduler creates its connector.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Any

from . import connectors, hotfix_scheduler, hotfixes
from .hotfix_plan import GUARD_KEY, _plan, _scheduler_half, plan, plan_class

__all__ = ["GUARD_KEY", "apply", "patch_class", "plan", "plan_class", "register"]

ENV = "PD_DOCTOR_HOTFIX"
ISSUE = "53514"
MARK = "_pd_doctor_hotfix"

log = logging.getLogger("vllm.pd_doctor_hotfix")
_announced = False


def enabled_fixes(environ: dict[str, str] | None = None) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(known fix names, unknown words) of PD_DOCTOR_HOTFIX's comma list."""
    env = os.environ if environ is None else environ
    return hotfixes.parse(env.get(ENV))


def enabled(environ: dict[str, str] | None = None) -> bool:
    """#53514's connector patch is enabled (PD_DOCTOR_HOTFIX names 53514)."""
    return ISSUE in enabled_fixes(environ)[0]


# ----------------------------------------------------------------------------- patching


def _early_wrapper(
    original: Any, attr: str | None, half_cls: Any, helper: str, keys: list[str], flags: list[str]
) -> Any:
    keys_t, flags_t = tuple(keys), tuple(flags)

    def wanted(half: Any, params: Any) -> bool:
        if not isinstance(params, dict):
            return False
        for k in keys_t:  # plain loops: this runs for every request the engine admits
            if not params.get(k):
                return False
        return all(getattr(half, f, False) for f in flags_t)

    def on_new_request(self: Any, request: Any, *args: Any, **kwargs: Any) -> Any:
        half = getattr(self, attr, None) if attr else self
        if isinstance(half, half_cls) and wanted(half, getattr(request, "kv_transfer_params", None)):
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


def apply_scheduler(fixes: list[str], *, announce: bool = True) -> list[dict[str, Any]]:
    """The Scheduler fixes (hotfix_scheduler.py), with one log line when something changed."""
    entries = hotfix_scheduler.apply(fixes)
    if announce and entries and any(e["status"] != "already patched" for e in entries):
        log.warning("%s", hotfix_scheduler.summary_line(entries))
    return entries


def register() -> None:
    """Entry point (vllm.general_plugins). Inert unless PD_DOCTOR_HOTFIX names a fix."""
    known, unknown = enabled_fixes()
    if unknown:
        log.warning(
            "pd-doctor hotfix: %s names no fix (%s): ignored",
            ENV,
            ", ".join(unknown) + "; known: " + ", ".join(hotfixes.names()),
        )
    if not known:
        return
    try:
        from vllm.v1.core.sched.scheduler import Scheduler
    except Exception as exc:  # pragma: no cover - layout drift
        log.warning("pd-doctor hotfix %s: cannot import Scheduler (%r); not applied", ",".join(known), exc)
        return
    if getattr(Scheduler.__init__, MARK, False):
        return
    original_init = Scheduler.__init__
    on_scheduler = [k for k in known if k != ISSUE]

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        vllm_config = kwargs.get("vllm_config", args[0] if args else None)
        try:
            names = _configured_names(vllm_config) if ISSUE in known else []
            if names != []:
                apply(names)
        except Exception as exc:  # never break the engine
            log.warning("pd-doctor hotfix %s: not applied: %r", ISSUE, exc)
        try:
            if on_scheduler:
                apply_scheduler(on_scheduler)
        except Exception as exc:  # never break the engine
            log.warning("pd-doctor hotfix %s: not applied: %r", ",".join(on_scheduler), exc)
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
        doc["fixes"] = hotfix_scheduler.plan()
    except Exception as exc:
        doc["error"] = f"{type(exc).__name__}: {exc}"
    with open(ns.out, "w", encoding="utf-8") as fh:
        json.dump(doc, fh)
    return 0


if __name__ == "__main__":
    sys.exit(main())
