"""`matrix --scenario` and `bisect --scenario`: the scenarios release by release (one child each)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import replace

from vllm_pd_doctor.infra.errors import PdDoctorError
from vllm_pd_doctor.infra.progress import Progress, quiet
from vllm_pd_doctor.knowledge.facts import scenarios as known
from vllm_pd_doctor.knowledge.facts.connectors import DEFAULT_KEY
from vllm_pd_doctor.knowledge.facts.releases import version_key
from vllm_pd_doctor.repro import envs
from vllm_pd_doctor.repro.matrix import BisectResult, BisectStep, bisect_releases
from vllm_pd_doctor.repro.scenarios.run import run_scenarios
from vllm_pd_doctor.results.scenarios import FAILS, HOLDS, ScenarioBisect, ScenarioMatrix, ScenarioRow


def row(
    package: str,
    release: str,
    ids: tuple[str, ...],
    timeout: float,
    progress: Progress,
    connectors: tuple[str, ...] = ("all",),
) -> ScenarioRow:
    """One release: provision (or reuse) its environment, run every scenario in one child."""
    t0 = time.perf_counter()
    try:
        env = envs.ensure_or_clean(package, release, progress=progress)
        report = run_scenarios(str(env.python), ids, timeout=timeout, connectors=connectors)
    except PdDoctorError as exc:
        progress(f"{release}: could not run: {exc.message}")
        return ScenarioRow(release, reason=exc.message, run_s=round(time.perf_counter() - t0, 2))
    failing = sorted({c.scenario for c in report.cells if c.status == FAILS})
    progress(f"{release}: {'FAILS ' + ', '.join(failing) if failing else 'every scenario holds'}")
    return ScenarioRow(release, report=report, run_s=round(time.perf_counter() - t0, 2))


def run_matrix(
    package: str,
    releases: Sequence[str],
    ids: tuple[str, ...],
    *,
    timeout: float = 600.0,
    progress: Progress = quiet,
    connectors: tuple[str, ...] = ("all",),
) -> ScenarioMatrix:
    """Every scenario in every release (on `connectors`, or every one each concerns), one release at
    a time (each a vLLM import)."""
    t0 = time.perf_counter()
    rows = [row(package, r, ids, timeout, progress, connectors) for r in sorted(releases, key=version_key)]
    rows = later_holds(rows)
    conns = tuple(dict.fromkeys(c for s in ids for c in known.SCENARIOS[s].connectors))
    if connectors != ("all",):
        conns = tuple(c for c in conns if c in connectors)
    return ScenarioMatrix(
        package=package,
        scenarios=ids,
        connectors=conns,
        rows=tuple(rows),
        wall_s=round(time.perf_counter() - t0, 2),
    )


def later_holds(rows: list[ScenarioRow]) -> list[ScenarioRow]:
    """Each failing cell's remedy with the first later release of this matrix whose run holds for
    the same scenario and connector, where that is earlier than the recorded runs say (or they say
    none): the runs pd-doctor just made count as much as the recorded ones."""
    out = []
    for i, r in enumerate(rows):
        if r.report is None:
            out.append(r)
            continue
        cells = []
        for c in r.report.cells:
            if c.status == FAILS and c.remedy is not None:
                later = next((x.release for x in rows[i + 1 :] if _holds(x, c.scenario, c.connector)), None)
                known_from = c.remedy.holds_from
                if later and (known_from is None or version_key(later) < version_key(known_from)):
                    c = replace(c, remedy=replace(c.remedy, holds_from=later))
            cells.append(c)
        out.append(replace(r, report=replace(r.report, cells=tuple(cells))))
    return out


def _holds(r: ScenarioRow, scenario: str, connector: str) -> bool:
    c = r.report.cell(scenario, connector) if r.report is not None else None
    return c is not None and c.status == HOLDS


def run_bisect(
    package: str,
    scenario_id: str,
    candidates: Sequence[str],
    *,
    connector: str = DEFAULT_KEY,
    timeout: float = 600.0,
    progress: Progress = quiet,
) -> ScenarioBisect:
    """The first release where `scenario_id` on `connector` changes between fails and holds."""
    t0 = time.perf_counter()
    rows: dict[str, ScenarioRow] = {}

    def probe(release: str) -> BisectStep:
        progress(f"testing {release}")
        r = row(package, release, (scenario_id,), timeout, progress)
        rows[release] = r
        c = r.report.cell(scenario_id, connector) if r.report is not None else None
        if c is None or c.status not in (FAILS, HOLDS):
            return BisectStep(release, None)
        return BisectStep(release, c.status == FAILS)

    result = bisect_releases(candidates, probe, prefer=lambda v: envs.find(package, v) is not None)
    return _bisect_report(package, scenario_id, connector, result, rows, time.perf_counter() - t0)


def _bisect_report(
    package: str, sid: str, connector: str, result: BisectResult, rows: dict[str, ScenarioRow], wall: float
) -> ScenarioBisect:
    word = {True: FAILS, False: HOLDS, None: "untested"}
    locs = {}
    for release, r in rows.items():
        c = r.report.cell(sid, connector) if r.report is not None else None
        locs[release] = c.location if c is not None else None
    return ScenarioBisect(
        package=package,
        scenario=sid,
        connector=connector,
        outcome=result.outcome,
        before=result.before,
        after=result.after,
        steps=tuple((s.release, word[s.verdict]) for s in result.steps),
        locations=locs,
        wall_s=round(wall, 2),
    )
