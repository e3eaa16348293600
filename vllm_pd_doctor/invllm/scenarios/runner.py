"""Run P/D failure scenarios on vLLM's real scheduler, all in this one vLLM process.

Runs INSIDE the target vLLM interpreter, as `python -m <pkg>.scenarios.runner --spec JSON --out FILE`.
The spec names the scenarios (each with the connectors it concerns, from the tool's registry), the
connectors asked for and the model; with `hotfix` true, each scenario's hotfix (knowledge/facts/hotfixes.py)
is applied before any scheduler is built, and each cell says what it did there. Each scenario x
connector runs its recipe and its control on fresh real Schedulers; the answer (one JSON document)
says what vLLM did in each.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import time
import traceback
from typing import Any

from .. import harness, hotfix, hotfix_scheduler, hotfixes, observe, wire
from ..drive import InternalsError
from .common import Ctx, NotApplicable

PACKAGE = __spec__.parent if __spec__ is not None else __name__.rsplit(".", 1)[0]


def run_one(ctx: Ctx, scenario: dict[str, Any], key: str, vllm_name: str) -> dict[str, Any]:
    """One scenario x connector: recipe, control and notes, or why it could not run."""
    base: dict[str, Any] = {"scenario": scenario["id"], "connector": key, "kv_connector": vllm_name}
    t0 = time.perf_counter()
    try:
        harness.check_importable(ctx.registry, vllm_name)
        module = importlib.import_module(f"{PACKAGE}.{scenario['id'].replace('-', '_')}")
        base.update(module.run(ctx, key, vllm_name))
        base["status"] = "ran"
    except NotApplicable as exc:
        base.update(status="not_applicable", reason=str(exc))
    except InternalsError as exc:
        base.update(
            status="could_not_run",
            error={"kind": getattr(exc, "kind", "internals"), "stage": exc.stage, "message": exc.message},
        )
    except Exception as exc:
        base.update(
            status="could_not_run",
            error={
                "kind": "internals",
                "stage": f"run scenario {scenario['id']}",
                "message": f"{type(exc).__name__}: {exc}",
                "traceback": traceback.format_exc(),
            },
        )
    base["elapsed_s"] = round(time.perf_counter() - t0, 3)
    return base


def run(spec: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"schema_version": wire.SCHEMA_VERSION, "engine": "scenario", "spec": spec}
    out["python"] = observe.python_info()
    t0 = time.perf_counter()
    try:
        import torch  # noqa: F401
        import vllm.config
        import vllm.v1.core.sched.scheduler  # noqa: F401
    except ImportError as exc:
        out["error"] = {"kind": "no_vllm", "stage": "import vllm", "message": f"{type(exc).__name__}: {exc}"}
        return out
    out["timings"] = {"import_s": round(time.perf_counter() - t0, 3)}
    try:
        _fill(spec, out)
    except Exception as exc:
        out["error"] = {
            "kind": "internals",
            "stage": "run the scenarios",
            "message": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
        }
    out["timings"]["total_s"] = round(time.perf_counter() - t0, 3)
    return out


def _fill(spec: dict[str, Any], out: dict[str, Any]) -> None:
    out["vllm"] = harness.vllm_facts()
    ctx = Ctx(spec)
    ctx.registry = harness.connector_registry()
    present = harness.available_connectors(ctx.registry)
    out["available_connectors"] = sorted(present)
    asked = spec.get("connectors") or ["all"]
    fixes = apply_hotfixes(spec, present) if spec.get("hotfix") else {}
    results = []
    for scenario in spec["scenarios"]:
        ctx.model_dir = str(scenario.get("model_dir") or spec["model_dir"])
        for key in scenario["connectors"]:
            if asked != ["all"] and key not in asked:
                continue
            if key not in present:
                results.append(
                    {
                        "scenario": scenario["id"],
                        "connector": key,
                        "status": "not_present",
                        "reason": f"this vLLM has no {key} connector",
                    }
                )
                continue
            results.append(run_one(ctx, scenario, key, present[key]))
            if (scenario["id"], key) in fixes:
                results[-1]["hotfix"] = fixes[scenario["id"], key]
    out["results"] = results
    out["models"] = {model: s.facts for model, s in ctx.setups.items()}


def apply_hotfixes(spec: dict[str, Any], present: dict[str, str]) -> dict[tuple[str, str], dict[str, Any]]:
    """Each asked scenario's hotfix, applied now: (scenario, connector key) -> what it did there."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for scenario in spec["scenarios"]:
        h = hotfixes.for_scenario(scenario["id"])
        keys = [k for k in scenario["connectors"] if k in present]
        if h is None or not keys:
            continue
        if h.scheduler:
            (e,) = hotfix_scheduler.apply([h.name])
            out.update({(scenario["id"], k): e for k in keys})
            continue
        for e in hotfix.apply([present[k] for k in keys], announce=False):
            for k in keys:
                if present[k] in (e.get("kv_connectors") or ()):
                    out[scenario["id"], k] = _connector_entry(h.name, e)
    return out


def _connector_entry(fix: str, e: dict[str, Any]) -> dict[str, Any]:
    """#53514's per-class entry in the scheduler fixes' shape."""
    return {
        "fix": fix,
        "label": "",
        "status": e.get("status"),
        "reason": e.get("reason"),
        "function": f"{e.get('class')}.{e.get('hook')}" if e.get("hook") else e.get("class"),
        "at": e.get("late_call_at") or e.get("early_call_at"),
        "sites": [x for x in (e.get("helper_at"),) if x],
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec", required=True, help="JSON run spec")
    parser.add_argument("--out", required=True, help="where to write the JSON answer")
    ns = parser.parse_args(argv)
    result = run(json.loads(ns.spec))
    tmp = ns.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(result, fh, default=str)
    os.replace(tmp, ns.out)
    return 0


if __name__ == "__main__":
    wire.exit_now(main())  # the answer is written: no interpreter teardown to wait for
