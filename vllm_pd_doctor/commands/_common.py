"""Helpers shared by the subcommands: output streams, progress, the error boundary."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, TypeVar

import typer
from rich.console import Console

from vllm_pd_doctor.errors import boundary
from vllm_pd_doctor.formats import OutputFormat

T = TypeVar("T")

DebugOpt = Annotated[bool, typer.Option("--debug", help="Show tracebacks and child logs on errors.",
                                        envvar="PD_DOCTOR_DEBUG")]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", "-f",
                                                 help="Report format on stdout.")]
PythonOpt = Annotated[Path | None, typer.Option(
    "--python", help="Interpreter of the vLLM environment to examine (default: this one). "
                     "pd-doctor need not be installed there.", show_default=False)]


def stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def progress_printer(enabled: bool = True) -> Callable[[str], None]:
    err = stderr()

    def say(msg: str) -> None:
        if enabled:
            err.print(f"[dim]pd-doctor:[/dim] {msg}", markup=True, highlight=False)

    return say


def hint(msg: str) -> None:
    stderr().print(f"[yellow]pd-doctor: note:[/yellow] {msg}", highlight=False)


def out(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()


def stdout_color() -> bool:
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


def stdout_width() -> int:
    try:
        return max(80, min(160, int(os.environ.get("COLUMNS", "0")) or os.get_terminal_size().columns))
    except OSError:
        return 110


def run(fn: Callable[[], int], *, debug: bool) -> None:
    """Run a command body inside the error boundary and exit with its code."""
    with boundary(debug=debug):
        code = fn()
    raise typer.Exit(code)
