"""Run scenarios in the target vLLM (one child for all of them) and read the answer into results."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from vllm_pd_doctor.infra import targetrun
from vllm_pd_doctor.infra.errors import BadInput, CouldNotRun
from vllm_pd_doctor.infra.progress import Progress, phase, quiet
from vllm_pd_doctor.knowledge.facts import scenario_exposure as sx
from vllm_pd_doctor.knowledge.facts import scenarios as known
from vllm_pd_doctor.repro import models as defaults
from vllm_pd_doctor.results.hotfix import FixState
from vllm_pd_doctor.results.repro import VllmInstall
from vllm_pd_doctor.results.scenarios import (
    CONTROL_FAILED,
    COULD_NOT_RUN,
    FAILS,
    HOLDS,
    NOT_APPLICABLE,
    Outcome,
    ScenarioCell,
    ScenarioReport,
)

DENSE_MODEL = defaults.DENSE
NOT_SERVABLE_WORDS = "vLLM would not start this model"


def parse_scenarios(value: str) -> tuple[str, ...]:
    """`--scenario`: ids in the order given, or every one for `all` (BadInput on an unknown id)."""
    names = tuple(dict.fromkeys(s.strip().lower() for s in value.split(",") if s.strip()))
    if "all" in names:
        return known.ids()
    bad = [n for n in names if known.get(n) is None]
    later = [n for n in bad if n in known.NOT_YET]
    if later:
        raise BadInput(
            f"--scenario {later[0]}: not reproduced by this pd-doctor ({known.NOT_YET[later[0]]})",
            hint=f"the scenarios it runs: {', '.join(known.ids())}",
        )
    if bad or not names:
        raise BadInput(
            f"--scenario {value}: unknown scenario",
            hint=f"use one of {', '.join(known.ids())}, a comma list, or all (--list-scenarios)",
        )
    return names


def build_spec(
    ids: tuple[str, ...],
    connectors: tuple[str, ...],
    model: Path | None,
    block_size: int | None,
    hotfix: bool = False,
) -> dict[str, Any]:
    """The runner's spec: each scenario with its connectors and the model it runs on (and, with
    `hotfix`, each scenario's hotfix applied before any scheduler is built)."""
    user = str(model or defaults.hybrid())
    entries = []
    for sid in ids:
        s = known.SCENARIOS[sid]
        m = user if (s.model_matters or model is not None) else str(defaults.dense())
        entries.append({"id": sid, "connectors": list(s.connectors), "model_dir": m})
    return {
        "scenarios": entries,
        "connectors": list(connectors),
        "model_dir": user,
        "block_size": block_size,
        "triggers": ["same-prompt"],
        "hotfix": hotfix,
    }


def run_scenarios(
    python: str,
    ids: tuple[str, ...],
    *,
    connectors: tuple[str, ...] = ("all",),
    model: Path | None = None,
    block_size: int | None = None,
    timeout: float = 600.0,
    progress: Progress = quiet,
    hotfix: bool = False,
) -> ScenarioReport:
    """Every scenario in `ids` x connector, in one child of `python` (with `hotfix`: each with its
    hotfix applied first)."""
    interp = targetrun.probe_interpreter(python)
    targetrun.require_vllm(interp)
    spec = build_spec(ids, connectors, model, block_size, hotfix)
    with_fix = " with their hotfixes" if hotfix else ""
    with phase(progress, f"running {len(ids)} scenario(s){with_fix} in vLLM {interp.vllm_version or '?'}"):
        run = targetrun.run_module(
            python, "scenarios.runner", ["--spec", json.dumps(spec)], timeout=timeout, what="the scenarios"
        )
    return parse_answer(run.answer, python, ids)


def parse_answer(answer: dict[str, Any], python: str, ids: tuple[str, ...]) -> ScenarioReport:
    """The runner's answer as a ScenarioReport (CouldNotRun where the whole run failed)."""
    err = answer.get("error")
    if err:
        if err.get("kind") == "no_vllm":
            raise CouldNotRun(
                f"vLLM cannot be imported in this interpreter: {err.get('message')}",
                hint="point --python at your vLLM environment's interpreter",
            )
        raise CouldNotRun(
            f"the scenarios could not run ({err.get('stage')}): {err.get('message')}",
            hint="rerun with --debug and report it",
            detail=err.get("traceback"),
        )
    v = answer.get("vllm") or {}
    version = str(v.get("version", "?"))
    return ScenarioReport(
        vllm=VllmInstall(version=version, path=str(v.get("path", "?")), python=python),
        scenarios=ids,
        cells=tuple(with_remedy(cell(r), version) for r in answer.get("results", [])),
        model=str((answer.get("spec") or {}).get("model_dir", "?")),
        available_connectors=tuple(answer.get("available_connectors", ())),
        timings={k: float(x) for k, x in (answer.get("timings") or {}).items()},
        hotfix=bool((answer.get("spec") or {}).get("hotfix")),
    )


def outcome(o: dict[str, Any] | None) -> Outcome | None:
    if not o:
        return None
    keys = ("how", "location", "function", "statement", "exception", "message", "invariant", "traceback")
    return Outcome(
        failed=bool(o.get("failed")),
        observed=dict(o.get("observed") or {}),
        **{k: (None if o.get(k) is None else str(o[k])) for k in keys},
    )


def fix_state(d: dict[str, Any] | None) -> FixState | None:
    """What a scenario's hotfix did in the child (None: no hotfix asked, or none for it)."""
    if not d:
        return None
    from vllm_pd_doctor.repro.hotfix import fix_from_dict

    return fix_from_dict(d)


def with_remedy(c: ScenarioCell, version: str) -> ScenarioCell:
    """A failing cell with its remedy (the first release where the recorded runs hold for its
    connector, the hotfix, the workaround); any other cell as it is."""
    if c.status != FAILS:
        return c
    return replace(c, remedy=sx.remedy(c.scenario, c.connector, version))


def cell(r: dict[str, Any]) -> ScenarioCell:
    """One scenario x connector: its verdict from the recipe and the control."""
    base: dict[str, Any] = {
        "scenario": str(r.get("scenario", "?")),
        "connector": str(r.get("connector", "?")),
        "kv_connector": r.get("kv_connector"),
        "elapsed_s": r.get("elapsed_s"),
        "notes": tuple(str(n) for n in r.get("notes", ())),
        "hotfix": fix_state(r.get("hotfix")),
    }
    status = str(r.get("status", COULD_NOT_RUN))
    if status != "ran":
        e = r.get("error") or {}
        reason = r.get("reason") or (f"{e.get('stage')}: {e.get('message')}" if e else None)
        if e.get("kind") == "not_servable" or NOT_SERVABLE_WORDS in str(e.get("message", "")):
            status, reason = NOT_APPLICABLE, str(e.get("message"))
        return ScenarioCell(status=status, reason=reason, **base)
    recipe, control = outcome(r.get("recipe")), outcome(r.get("control"))
    if control is not None and control.failed:
        verdict = CONTROL_FAILED
    elif recipe is not None and recipe.failed:
        verdict = FAILS
    else:
        verdict = HOLDS
    return ScenarioCell(status=verdict, recipe=recipe, control=control, **base)
