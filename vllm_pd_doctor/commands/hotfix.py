"""`pd-doctor hotfix install|status|uninstall`: the opt-in #53514 backport as a vLLM plugin."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from vllm_pd_doctor.commands._common import (
    DebugOpt,
    FormatOpt,
    PythonOpt,
    QuietOpt,
    VllmOpt,
    hint,
    interpreter,
    progress_printer,
    show,
)
from vllm_pd_doctor.formats import OutputFormat
from vllm_pd_doctor.infra.errors import ExitCode
from vllm_pd_doctor.knowledge.facts.hotfix_env import ENV, ENV_SETTING

hotfix_app = typer.Typer(
    help=f"Opt-in runtime backport of the vLLM #53514 fix for releases that cannot be upgraded "
    f"yet: a small vLLM plugin (stdlib + vLLM only) that, in engines started with "
    f"{ENV_SETTING}, truncates P-side hybrid/Mamba prompts in on_new_request (before "
    f"the prefix-cache lookup) through the release's own helper. Verify it first with "
    f"`pd-doctor repro --hotfix`. The same plugin carries Scheduler fixes, enabled by name in the "
    f"same variable's comma list (e.g. {ENV}=53514,hybrid-load-failure,abort-race; abort-race is "
    f"not merged upstream): each is verified by `pd-doctor repro --scenario NAME --hotfix`, and "
    f"`hotfix status` lists them.\n\n"
    f"Example: `pd-doctor hotfix status --python ENV/bin/python`",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(hotfix_app, name="hotfix")


def _python(python: Path | None, vllm: str | None = None) -> str:
    return interpreter(python, vllm, None, progress_printer(True))


@hotfix_app.command("install")
def install(
    python: PythonOpt = None,
    vllm: VllmOpt = None,
    fmt: FormatOpt = OutputFormat.table,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Install the plugin into that environment's site-packages (its own dist-info, no deps).

    Example: `pd-doctor hotfix install --python ENV/bin/python`
    """
    from vllm_pd_doctor.repro import hotfix as core

    py = _python(python, vllm)
    show(core.install(py), fmt)
    if not quiet:
        hint(
            f"inert until an engine starts with {ENV_SETTING} (or another fix's name, a comma "
            f"list: {ENV}=NAME[,NAME...]) in its environment; check with: pd-doctor hotfix status "
            f"--python {py}"
        )
    return ExitCode.OK


@hotfix_app.command("uninstall")
def uninstall(
    python: PythonOpt = None,
    vllm: VllmOpt = None,
    fmt: FormatOpt = OutputFormat.table,
    debug: DebugOpt = False,
) -> int:
    """Remove exactly the files install wrote (its RECORD) and their bytecode.

    Example: `pd-doctor hotfix uninstall --python ENV/bin/python`
    """
    from vllm_pd_doctor.repro import hotfix as core

    show(core.uninstall(_python(python, vllm)), fmt)
    return ExitCode.OK


@hotfix_app.command("status")
def status(
    python: PythonOpt = None,
    vllm: VllmOpt = None,
    fmt: FormatOpt = OutputFormat.table,
    deep: Annotated[
        bool,
        typer.Option(
            "--deep",
            help="Decide 'needed' by running the plugin's own plan in that "
            "interpreter (imports vLLM) instead of reading its source.",
        ),
    ] = False,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> int:
    """Installed? Enabled (PD_DOCTOR_HOTFIX here)? Needed by that release (observed there)?

    Example: `pd-doctor hotfix status --python ENV/bin/python --deep --format json`
    """
    from vllm_pd_doctor.repro import hotfix as core

    progress = progress_printer(not quiet)
    py = _python(python, vllm)
    progress(f"{'importing' if deep else 'reading'} the installed vLLM's connector classes in {py}")
    from vllm_pd_doctor.knowledge.readers.inspect_vllm import find_sites

    show(core.status(py, find_sites, deep=deep), fmt)
    return ExitCode.OK
