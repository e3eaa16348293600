"""What `repro --scenario` does beyond the default run (kept here so the command stays thin)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vllm_pd_doctor.commands._common import hint, show
from vllm_pd_doctor.formats import OutputFormat
from vllm_pd_doctor.infra.errors import BadInput, CouldNotRun, ExitCode
from vllm_pd_doctor.infra.progress import Progress
from vllm_pd_doctor.knowledge.facts import hotfixes
from vllm_pd_doctor.knowledge.facts import scenarios as known
from vllm_pd_doctor.knowledge.models import resolve as models
from vllm_pd_doctor.repro import request as scenario
from vllm_pd_doctor.repro.scenarios import run as srun
from vllm_pd_doctor.results.scenarios import CONTROL_FAILED, COULD_NOT_RUN, ScenarioCatalogue, ScenarioReport


def wants_scenarios(value: str) -> bool:
    """Anything but the default `n1-truncation` alone goes through the scenario runner."""
    return srun.parse_scenarios(value) != (known.DEFAULT,)


def list_scenarios(fmt: OutputFormat) -> int:
    show(ScenarioCatalogue(ids=known.ids()), fmt)
    return ExitCode.OK


def check_hotfix(value: str, hotfix: bool) -> tuple[str, ...]:
    """`--scenario` ids; with `--hotfix`, each one named must have a hotfix (`all`: those that do
    get theirs, the others run as they are)."""
    ids = srun.parse_scenarios(value)
    if not hotfix:
        return ids
    named = "all" not in (w.strip().lower() for w in value.split(","))
    without = [i for i in ids if hotfixes.for_scenario(i) is None]
    if (named and without) or len(without) == len(ids):
        with_fix = ", ".join(h.scenario for h in hotfixes.HOTFIXES)
        raise BadInput(
            f"--hotfix: scenario {without[0]} has no hotfix (scenarios with one: {with_fix})",
            hint=f"pd-doctor repro --scenario {without[0]} (without --hotfix)",
        )
    return ids


def run(
    python: str,
    value: str | tuple[str, ...],
    *,
    connector: str | None,
    model: Path | None,
    block_size: int | None,
    timeout: float,
    fmt: OutputFormat,
    progress: Progress,
    hotfix: bool = False,
) -> int:
    ids = srun.parse_scenarios(value) if isinstance(value, str) else value
    conns = scenario.parse_connector_list(connector) if connector is not None else ("all",)
    model_dir = models.resolve(str(model)).directory.resolve() if model is not None else None
    report = srun.run_scenarios(
        python,
        ids,
        connectors=conns,
        model=model_dir,
        block_size=block_size,
        timeout=timeout,
        progress=progress,
        hotfix=hotfix,
    )
    show(report, fmt)
    return exit_code(report)


def run_live(req: scenario.ReproRequest, values: Mapping[str, Any], progress: Progress) -> int:
    """`repro --engine live --scenario`: the client-triggerable ones on a real pair (or endpoints)."""
    from vllm_pd_doctor.commands._common import interpreter
    from vllm_pd_doctor.repro import live
    from vllm_pd_doctor.repro.live import scenarios as live_scenarios

    asked = req.scenario.strip().lower()
    ids = known.live_ids() if asked == "all" else live_scenarios.check(srun.parse_scenarios(asked))
    lo = live.from_request(req)
    py = interpreter(values["python"], values["vllm"], values["package"], progress, nixl=not lo.remote)
    report = live_scenarios.run_scenarios(py, lo, ids, progress)
    show(report, values["fmt"])
    return exit_code(report)


def exit_code(report: ScenarioReport) -> int:
    """1: some scenario fails here; 0: every one that ran holds; 3: none could run."""
    for c in report.cells:
        if c.status in (COULD_NOT_RUN, CONTROL_FAILED):
            hint(f"{c.scenario} / {c.connector}: {c.status.replace('_', ' ')}: {c.reason or c.control}")
    refused = {
        c.hotfix.title: c.hotfix.reason for c in report.cells if c.hotfix and c.hotfix.status == "refused"
    }
    for title, why in refused.items():
        hint(f"hotfix {title} refused: {why}")
    if report.failed:
        return ExitCode.FOUND
    if report.any_ran:
        return ExitCode.OK
    raise CouldNotRun("no scenario could run here (the reasons are above)", hint="rerun with --debug")


def matrix(
    package: str,
    releases: tuple[str, ...],
    value: str,
    *,
    fmt: OutputFormat,
    timeout: float,
    progress: Progress,
    connector: str | None = None,
) -> int:
    """`matrix --scenario`: 1 some release fails a scenario, 3 nothing ran, else 0."""
    from vllm_pd_doctor.repro.scenarios import matrix as smatrix

    conns = scenario.parse_connector_list(connector) if connector is not None else ("all",)
    report = smatrix.run_matrix(
        package, releases, srun.parse_scenarios(value), timeout=timeout, progress=progress, connectors=conns
    )
    show(report, fmt)
    if report.failed:
        return ExitCode.FOUND
    return ExitCode.OK if report.any_ran else ExitCode.COULD_NOT_RUN


BISECT_EXIT = {"changed": ExitCode.OK, "no_change": ExitCode.FOUND, "endpoint_failed": ExitCode.COULD_NOT_RUN}


def bisect(
    package: str,
    value: str,
    candidates: tuple[str, ...],
    *,
    connector: str,
    fmt: OutputFormat,
    timeout: float,
    progress: Progress,
) -> int:
    """`bisect --scenario X`: exit codes as bisect's (0 changed, 1 no change, 3 an end untested)."""
    from vllm_pd_doctor.infra.errors import BadInput
    from vllm_pd_doctor.repro.scenarios import matrix as smatrix

    ids = srun.parse_scenarios(value)
    if len(ids) != 1:
        raise BadInput(f"--scenario {value}: bisect follows one scenario", hint="give one id")
    report = smatrix.run_bisect(
        package, ids[0], candidates, connector=connector, timeout=timeout, progress=progress
    )
    show(report, fmt)
    return BISECT_EXIT[report.outcome]
