"""Runtime backports of two Scheduler fixes (PD_DOCTOR_HOTFIX=hybrid-load-failure,abort-race).

Stdlib + vLLM only (vLLM imported when a fix is applied; a plan only parses source, so the tool
process reads it from an installed release's file without importing vLLM). Each fix is one module,
planned from the installed `Scheduler` class body with `ast`, never from a version string:
`hotfix_load_failure.py` (hybrid-load-failure, vllm#45474, the shape of merged PR #50388) and
`hotfix_abort_race.py` (abort-race, vllm#46240: PRs #46304 / #56089, NOT MERGED upstream).

A shape neither expected nor fixed is refused with the reason. `apply()` is idempotent (a marker on
the patched function) and `summary_line()` words what it did in one line.
"""

from __future__ import annotations

import inspect
from pathlib import Path
from typing import Any

from . import hotfix_abort_race, hotfix_load_failure, hotfixes
from . import hotfix_source as src

MARK = "_pd_doctor_hotfix"
MODULE = "vllm.v1.core.sched.scheduler"
CLASS = src.CLASS
SOURCE = ("v1", "core", "sched", "scheduler.py")
"""The scheduler's file under the vllm package directory."""
APPLIED = ("patched", "already patched")

PLANS = {
    "hybrid-load-failure": hotfix_load_failure.plan,
    "abort-race": hotfix_abort_race.plan,
}
"""Each scheduler fix of the registry (knowledge/facts/hotfixes.py) -> its planner."""


def plan_file(path: str | Path, fixes: list[str] | None = None) -> list[dict[str, Any]]:
    """What `apply(fixes)` would do, read from a scheduler.py file (no vLLM import)."""
    cs = src.ClassSource(str(path), Path(path).read_text(encoding="utf-8"))
    names = [f for f in (fixes or list(PLANS)) if f in PLANS]
    if cs.node is None:
        return [
            src.out(src.entry(f, cs, "?", None), "refused", f"no class {CLASS} in {cs.rel}") for f in names
        ]
    return [PLANS[f](cs) for f in names]


def scheduler_file(vllm_dir: str | Path) -> Path:
    return Path(vllm_dir).joinpath(*SOURCE)


def plan(fixes: list[str] | None = None) -> list[dict[str, Any]]:
    """The plan for the vLLM of this process, from its Scheduler's source file."""
    import importlib

    mod = importlib.import_module(MODULE)
    return plan_file(inspect.getsourcefile(mod) or "?", fixes)


def apply(fixes: list[str] | None = None) -> list[dict[str, Any]]:
    """Patch vLLM's Scheduler with each planned fix of `fixes` (default all). Idempotent."""
    import importlib

    cls = getattr(importlib.import_module(MODULE), CLASS)
    entries = plan(fixes)
    for e in entries:
        if e["status"] != "patch":
            continue
        name = e["function"].split(".", 1)[1]
        current = cls.__dict__.get(name)
        if current is None:
            src.out(e, "refused", f"{CLASS}.{name} is not defined on the loaded class")
        elif getattr(current, MARK, None) == e["fix"]:
            e["status"] = "already patched"
        else:
            try:
                new = (
                    hotfix_load_failure.wrapper(current, e["roles"])
                    if e["fix"] == "hybrid-load-failure"
                    else hotfix_abort_race.recompiled(current, len(e["sites"]))
                )
            except (OSError, TypeError, ValueError, SyntaxError) as exc:
                src.out(e, "refused", f"cannot rebuild {CLASS}.{name} from its loaded source: {exc}")
                continue
            setattr(new, MARK, e["fix"])
            setattr(cls, name, new)
            e["status"] = "patched"
    return entries


def summary_line(entries: list[dict[str, Any]]) -> str:
    """One line: what each fix did (the log line of the plugin)."""
    parts = []
    for e in entries:
        h = hotfixes.get(e["fix"])
        title = h.title if h else e["fix"]
        if e["status"] in APPLIED:
            parts.append(f"{title}: {e['status']} {e['function']} ({', '.join(e.get('sites') or [])})")
        elif e["status"] == "not needed":
            parts.append(f"{title}: not needed: {e['reason']}")
        else:
            parts.append(f"{title}: REFUSED {e['function']}: {e['reason']}")
    return "pd-doctor hotfix " + "; ".join(parts)
