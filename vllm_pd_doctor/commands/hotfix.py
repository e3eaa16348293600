"""`pd-doctor hotfix install|status|uninstall`: the opt-in #53514 backport as a vLLM plugin."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table

from vllm_pd_doctor import hotfix as core
from vllm_pd_doctor import targetrun
from vllm_pd_doctor.commands._common import (
    DebugOpt,
    FormatOpt,
    PythonOpt,
    hint,
    out,
    progress_printer,
    run,
    stdout_color,
    stdout_width,
)
from vllm_pd_doctor.errors import ExitCode
from vllm_pd_doctor.formats import OutputFormat
from vllm_pd_doctor.formats import table as ftable
from vllm_pd_doctor.model import SCHEMA_VERSION

hotfix_app = typer.Typer(
    help=f"Opt-in runtime backport of the vLLM #53514 fix for releases that cannot be upgraded "
    f"yet: a small vLLM plugin (stdlib + vLLM only) that, in engines started with "
    f"{core.ENV_SETTING}, truncates P-side hybrid/Mamba prompts in on_new_request (before "
    f"the prefix-cache lookup) through the release's own helper. Verify it first with "
    f"`pd-doctor repro --hotfix`.",
    no_args_is_help=True,
)


def register(app: typer.Typer) -> None:
    app.add_typer(hotfix_app, name="hotfix")


def _python(python: Any) -> str:
    return targetrun.resolve_python(str(python) if python is not None else None)


@hotfix_app.command("install")
def install(python: PythonOpt = None, debug: DebugOpt = False) -> None:
    """Install the plugin into that environment's site-packages (its own dist-info, no deps)."""

    def body() -> int:
        py = _python(python)
        change = core.install(py)
        out(f"installed {core.DIST} into {change.site_packages}:\n")
        for f in change.files:
            out(f"  {f}\n")
        hint(
            f"inert until an engine starts with {core.ENV_SETTING} in its environment; "
            f"check with: pd-doctor hotfix status --python {py}"
        )
        return ExitCode.OK

    run(body, debug=debug)


@hotfix_app.command("uninstall")
def uninstall(python: PythonOpt = None, debug: DebugOpt = False) -> None:
    """Remove exactly the files install wrote (its RECORD) and their bytecode."""

    def body() -> int:
        change = core.uninstall(_python(python))
        out(f"removed {core.DIST} from {change.site_packages}:\n")
        for f in change.files:
            out(f"  {f}\n")
        return ExitCode.OK

    run(body, debug=debug)


@hotfix_app.command("status")
def status(
    python: PythonOpt = None,
    fmt: FormatOpt = OutputFormat.table,
    deep: Annotated[
        bool,
        typer.Option(
            "--deep",
            help="Decide 'needed' by running the plugin's own plan in that "
            "interpreter (imports vLLM) instead of reading its source.",
        ),
    ] = False,
    debug: DebugOpt = False,
) -> None:
    """Installed? Enabled (PD_DOCTOR_HOTFIX here)? Needed by that release (observed there)?"""
    progress = progress_printer()

    def body() -> int:
        py = _python(python)
        progress(f"{'importing' if deep else 'reading'} the installed vLLM's connector classes in {py}")
        st = core.status(py, deep=deep)
        if fmt is OutputFormat.json:
            out(json.dumps(status_obj(st), indent=2) + "\n")
        elif fmt is OutputFormat.markdown:
            out("\n".join(f"- **{k}**: {v}" for k, v in status_lines(st)) + "\n")
        else:
            table = Table(title=f"pd-doctor hotfix #{core.ISSUE}", title_justify="left", show_header=False)
            table.add_column(style="bold")
            table.add_column(overflow="fold")
            for k, v in status_lines(st):
                table.add_row(k, v)
            out(ftable.render(table, width=stdout_width(), color=stdout_color()))
        return ExitCode.OK

    run(body, debug=debug)


def status_lines(st: core.Status) -> list[tuple[str, str]]:
    inst = st.installed
    if inst is not None:
        installed = f"yes: {core.DIST} {inst.version} ({inst.dist_info})" + (
            "" if inst.current else "; OUTDATED, reinstall with pd-doctor hotfix install"
        )
    elif st.other_plugins:
        installed = "through pd-doctor's own plugin: " + ", ".join(st.other_plugins)
    else:
        installed = f"no (pd-doctor hotfix install --python {st.python})"
    enabled = (
        f"yes: {core.ENV_SETTING} is set here"
        if st.enabled
        else f"no: {core.ENV} is not {core.ISSUE} here; start the prefill engine with "
        f"{core.ENV_SETTING} in its environment"
    )
    if st.needed is None:
        needed = f"unknown: {st.plan_error or 'no P/D connector found'}"
    elif st.needed:
        needed = "yes: this release truncates after the prefix-cache lookup"
    else:
        needed = "no: this release already truncates in on_new_request"
    rows = [
        ("vLLM", f"{st.vllm_version or '?'} ({st.python})"),
        ("installed", installed),
        ("enabled", enabled),
        ("needed", needed),
    ]
    for p in st.plan:
        where = p.late_call_at or p.early_call_at or ""
        helper = f" -> {p.scheduler_class}.{p.helper}" if p.helper else ""
        helper += f" ({p.helper_at})" if p.helper_at else ""
        rows.append(
            (
                f"{p.connector} {p.class_name}",
                f"{p.status}{helper}; {p.reason}{'; call at ' + where if where else ''}",
            )
        )
    return rows


def status_obj(st: core.Status) -> dict[str, Any]:
    inst = st.installed
    return {
        "schema_version": SCHEMA_VERSION,
        "python": st.python,
        "site_packages": st.site_packages,
        "vllm_version": st.vllm_version,
        "installed": inst is not None,
        "dist_info": str(inst.dist_info) if inst else None,
        "current": inst.current if inst else None,
        "other_plugins": list(st.other_plugins),
        "enabled": st.enabled,
        "enable_with": core.ENV_SETTING,
        "needed": st.needed,
        "plan_error": st.plan_error,
        "plan": [p.__dict__ for p in st.plan],
    }
