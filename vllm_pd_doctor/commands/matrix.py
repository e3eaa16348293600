"""`pd-doctor matrix` and `pd-doctor bisect`: the in-process repro across vLLM releases."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from vllm_pd_doctor.commands._common import (
    CONNECTORS,
    VLLM,
    DebugOpt,
    FormatOpt,
    PackageOpt,
    QuietOpt,
    ScenarioOpt,
    TimeoutOpt,
    hint,
    progress_printer,
    show,
)
from vllm_pd_doctor.formats import OutputFormat
from vllm_pd_doctor.infra.errors import BadInput, CouldNotRun, ExitCode
from vllm_pd_doctor.knowledge.facts import connectors, examples

if TYPE_CHECKING:
    from vllm_pd_doctor.knowledge.facts import releases as rel

MATRIX_HELP = f"""Which vLLM releases and connectors hit vLLM #53514, measured release by release.

For each release, pd-doctor provisions (or reuses) its own environment with uv under
~/.cache/pd-doctor/envs (about 3 GB each), runs the in-process repro for every connector that
release has (block 16, N = 33, kv_producer) and prints release x connector -> FIRED / not fired /
not present / not runnable, with the hook that truncated the prompt and its vLLM file:line.

--vllm takes a comma list of releases and ranges; FIRST..LAST expands to the published releases
in that range (PyPI, pre-releases and .postN rebuilds left out). A release that is not published,
or that cannot be provisioned here (e.g. its torch pin is not installable), gets a row saying so.

Exit codes: 0 nothing fired, 1 some release x connector fired, 2 bad input (bad version,
empty range, no published release named), 3 nothing could run.

Example: `pd-doctor matrix --vllm {examples.OLDER}..{examples.FIXED} --format markdown`
"""

_DEFAULT = connectors.DEFAULT_KEY
BISECT_HELP = f"""Find the first release where a connector's verdict changes (default: {_DEFAULT}).

Tests --good and --bad, then bisects the published releases between them, testing releases
whose environment is already cached first and provisioning as few environments as possible.
Prints the two neighbouring releases with their truncation hook and call site. Releases that
cannot be provisioned are skipped and listed if the change may lie among them.

--only-cached restricts the search to releases whose environment already exists (no
provisioning): the answer is then the neighbouring cached releases, and the published releases
between them that were not tested are listed.

The JSON's `outcome` says which answer it is: changed (the change is located), no_change
(both ends give the same verdict) or endpoint_failed (an end could not be tested).

Exit codes: 0 the change was located (outcome changed), 1 both ends give the same verdict
(outcome no_change: nothing to find), 2 bad input, 3 an end could not be tested (outcome
endpoint_failed).

Example: `pd-doctor bisect --good {examples.FIXED} --bad {examples.LATE} --only-cached`
"""

BISECT_EXIT = {"changed": ExitCode.OK, "no_change": ExitCode.FOUND, "endpoint_failed": ExitCode.COULD_NOT_RUN}
"""bisect's exit code per outcome (the JSON's `outcome`); 1 is "no change", not "found"."""

MatrixConnectorOpt = Annotated[str | None, CONNECTORS]
"""With --scenario: run these connectors only (default: every one each scenario concerns)."""


def register(app: typer.Typer) -> None:
    app.command("matrix", help=MATRIX_HELP)(matrix)
    app.command("bisect", help=BISECT_HELP)(bisect)


def _package(package: str | None) -> str:
    from vllm_pd_doctor.repro import envs as envs_mod

    pkg = package or envs_mod.default_package()
    envs_mod.validate(pkg, "0.0.0")
    return pkg


def _unknown_reason(pub: rel.PublishedReleases, version: str) -> str:
    lo, hi = pub.neighbours(version)
    near = ", ".join(v for v in (lo, hi) if v)
    return f"{pub.package} {version} is not a published release" + (f" (nearest: {near})" if near else "")


def _releases(vllm: str, pkg: str) -> tuple[tuple[str, ...], dict[str, str], str | None]:
    """The releases `--vllm` names (ranges from PyPI), the unknown ones with why, the source."""
    from vllm_pd_doctor.knowledge.facts import releases as rel

    spec = rel.parse_spec(vllm)  # syntax errors before any network access
    try:
        pub = rel.published(pkg)
    except CouldNotRun as exc:
        if any(hi is not None for _, hi in spec):
            raise
        hint(f"{exc.message}; running the listed releases without checking them")
        return tuple(sorted({lo for lo, _ in spec}, key=rel.version_key)), {}, None
    sel = rel.select(vllm, pub)
    unknown = {u: _unknown_reason(pub, u) for u in sel.unknown}
    if not sel.releases:
        raise BadInput(
            "; ".join(unknown.values()), hint="see the releases with `pip index versions " + pkg + "`"
        )
    return sel.releases, unknown, pub.source


def matrix(
    vllm: Annotated[str, VLLM],
    package: PackageOpt = None,
    jobs: Annotated[
        int,
        typer.Option(
            "--jobs",
            "-j",
            help="Releases provisioned and run at once (each environment needs ~3 GB of disk "
            "while installing; each repro one vLLM import). 1: one at a time, timings unskewed.",
        ),
    ] = 2,
    fmt: FormatOpt = OutputFormat.table,
    timeout: TimeoutOpt = 600.0,
    quiet: QuietOpt = False,
    scenario: ScenarioOpt = None,
    connector: MatrixConnectorOpt = None,
    debug: DebugOpt = False,
) -> int:
    from vllm_pd_doctor.knowledge.facts import releases as rel
    from vllm_pd_doctor.repro.matrix import run_matrix

    if connector is not None and scenario is None:
        raise BadInput(
            f"--connector {connector}: an option of matrix --scenario (#53514's matrix runs every connector)",
            hint="add --scenario ID, or drop --connector",
        )
    progress = progress_printer(not quiet)
    pkg = _package(package)
    if jobs < 1:
        rel.parse_spec(vllm)  # syntax errors first
        raise BadInput(f"--jobs {jobs}: must be at least 1")
    releases, unknown, source = _releases(vllm, pkg)
    progress(f"matrix over {len(releases)} release(s) of {pkg}: {', '.join(releases)}")
    if scenario is not None:
        from vllm_pd_doctor.commands import _scenarios as scenario_cli

        return scenario_cli.matrix(
            pkg, releases, scenario, fmt=fmt, timeout=timeout, progress=progress, connector=connector
        )
    report = run_matrix(
        pkg,
        releases,
        unknown=unknown,
        jobs=jobs,
        timeout=timeout,
        releases_source=source,
        progress=progress,
    )
    show(report, fmt)
    if report.fired:
        return ExitCode.FOUND
    if not report.any_ran:
        return ExitCode.COULD_NOT_RUN
    return ExitCode.OK


GoodOpt = Annotated[
    str, typer.Option("--good", help=f"A release with one verdict, e.g. {examples.FIXED}.", metavar="VERSION")
]
BadOpt = Annotated[
    str,
    typer.Option(
        "--bad", help=f"A release with the other verdict, e.g. {examples.RANGE_LOW}.", metavar="VERSION"
    ),
]
BisectConnectorOpt = Annotated[str, CONNECTORS]
"""The one connector whose verdict bisect follows (a list is bad input)."""
OnlyCachedOpt = Annotated[
    bool,
    typer.Option(
        "--only-cached",
        help="Search only releases whose environment already exists (no "
        "provisioning); the answer is bounded by cached releases.",
    ),
]


def bisect(
    good: GoodOpt,
    bad: BadOpt,
    package: PackageOpt = None,
    connector: BisectConnectorOpt = connectors.DEFAULT_KEY,
    only_cached: OnlyCachedOpt = False,
    fmt: FormatOpt = OutputFormat.table,
    timeout: TimeoutOpt = 600.0,
    quiet: QuietOpt = False,
    scenario: ScenarioOpt = None,
    debug: DebugOpt = False,
) -> int:
    from vllm_pd_doctor.repro import envs as envs_mod
    from vllm_pd_doctor.repro.matrix import run_bisect

    progress = progress_printer(not quiet)
    pkg = _package(package)
    pub = _check_bisect_range(pkg, good, bad, connector)
    candidates = pub.between(good, bad)
    if only_cached:
        missing = [v for v in (good, bad) if envs_mod.find(pkg, v) is None]
        if missing:
            raise BadInput(
                f"--only-cached: no cached environment for {', '.join(missing)}",
                hint=f"pd-doctor envs create {' '.join(missing)}",
            )
    if scenario is not None:
        from vllm_pd_doctor.commands import _scenarios as scenario_cli

        cands = tuple(v for v in candidates if not only_cached or envs_mod.find(pkg, v) is not None)
        return scenario_cli.bisect(
            pkg, scenario, cands, connector=connector, fmt=fmt, timeout=timeout, progress=progress
        )
    report = run_bisect(
        pkg,
        good,
        bad,
        candidates,
        connector=connector,
        timeout=timeout,
        only_cached=only_cached,
        releases_source=pub.source,
        progress=progress,
    )
    if only_cached:
        skipped = [v for v in candidates if envs_mod.find(pkg, v) is None]
        if skipped:
            hint("--only-cached: releases not searched (no cached environment): " + ", ".join(skipped))
    show(report, fmt)
    return BISECT_EXIT[report.result.outcome]


def _check_bisect_range(pkg: str, good: str, bad: str, connector: str) -> rel.PublishedReleases:
    """--good/--bad are two different published releases and --connector is known: the releases
    published for `pkg` (what bisect searches between)."""
    from vllm_pd_doctor.knowledge.facts import releases as rel

    for flag, v in (("--good", good), ("--bad", bad)):
        if not rel.is_release(v):
            raise BadInput(f"{flag} {v}: not a release version", hint=f"e.g. {examples.LATE}")
    if rel.version_key(good) == rel.version_key(bad):
        raise BadInput(f"--good and --bad are the same release ({good})")
    if connector not in connectors.connector_keys():
        several = "," in connector or connector == "all"
        raise BadInput(
            f"--connector {connector}: "
            + ("bisect follows one connector's verdict" if several else "unknown connector"),
            hint=f"use one of {', '.join(connectors.connector_keys())}",
        )
    pub = rel.published(pkg)
    for flag, v in (("--good", good), ("--bad", bad)):
        if v not in pub.versions:
            raise BadInput(f"{flag} {v}: {_unknown_reason(pub, v)}")
    return pub
