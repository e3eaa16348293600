"""Helpers shared by the subcommands: output streams, progress, the error boundary."""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.spinner import Spinner
from rich.text import Text

from vllm_pd_doctor import safeio
from vllm_pd_doctor.errors import boundary
from vllm_pd_doctor.formats import OutputFormat, emit
from vllm_pd_doctor.sanitize import text as safe_text

DebugOpt = Annotated[
    bool, typer.Option("--debug", help="Show tracebacks and child logs on errors.", envvar="PD_DOCTOR_DEBUG")
]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", "-f", help="Report format on stdout.")]
PythonOpt = Annotated[
    Path | None,
    typer.Option(
        "--python",
        help="Interpreter of the vLLM environment to examine (default: this one). "
        "pd-doctor need not be installed there.",
        show_default=False,
    ),
]


def stderr() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


class _Elapsed:
    """`12 s  what`, measured each time it is drawn, on one line."""

    def __init__(self, what: str, t0: float):
        self.what, self.t0 = what, t0

    def __rich__(self) -> Text:
        return Text(f"{time.monotonic() - self.t0:3.0f} s  {self.what}", no_wrap=True, overflow="ellipsis")


class Reporter:
    """The CLI's progress on stderr (a `PhasedProgress`): plain-text lines, never markup.

    A phase is announced as a line; on a terminal each open phase is also a live spinner line
    with its elapsed time (one `Live` for all of them: the matrix provisions in parallel).
    """

    def __init__(self, enabled: bool = True, console: Console | None = None):
        self.enabled = enabled
        self.console = console or stderr()
        self._lock = threading.RLock()  # Live draws `self` from its own thread
        self._keys = itertools.count()
        self._open: dict[int, Spinner] = {}
        self._live: Live | None = None

    def __call__(self, message: str, /) -> None:
        if self.enabled:
            self.console.print(Text.assemble(("pd-doctor: ", "dim"), safe_text(message)), highlight=False)

    def __rich__(self) -> RenderableType:
        with self._lock:
            return Group(*self._open.values())

    @contextmanager
    def phase(self, what: str) -> Iterator[None]:
        self(what)
        if not (self.enabled and self.console.is_terminal):
            yield
            return
        key = next(self._keys)
        with self._lock:
            self._open[key] = Spinner("dots", text=_Elapsed(what, time.monotonic()), style="cyan")
            if self._live is None:
                self._live = Live(
                    self,
                    console=self.console,
                    refresh_per_second=4,
                    transient=True,
                    redirect_stdout=False,
                    redirect_stderr=False,
                )
                self._live.start(refresh=True)
        try:
            yield
        finally:
            with self._lock:
                del self._open[key]
                live = self._live if not self._open else None
                if live is not None:
                    self._live = None
            if live is not None:
                live.stop()


def progress_printer(enabled: bool = True) -> Reporter:
    """The progress every command passes to the core (stderr; silent when not `enabled`)."""
    return Reporter(enabled)


def hint(msg: str) -> None:
    stderr().print(Text.assemble(("pd-doctor: note: ", "yellow"), safe_text(msg)), highlight=False)


def out(text: str) -> None:
    safeio.write_stdout(text)  # a closed or full stdout: one line, exit 3


def show(result: object, fmt: OutputFormat, *, as_list: bool = False) -> None:
    """Render a command's result in the format asked for, to stdout."""
    out(emit(result, fmt, width=stdout_width(), color=stdout_color(), as_list=as_list))


def stdout_color() -> bool:
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


def stdout_width() -> int:
    try:
        return max(80, min(160, int(os.environ.get("COLUMNS", "0")) or os.get_terminal_size().columns))
    except (OSError, ValueError, OverflowError):  # no terminal; COLUMNS=abc
        return 110


def run(fn: Callable[[], int], *, debug: bool) -> None:
    """Run a command body inside the error boundary and exit with its code."""
    with boundary(debug=debug):
        code = fn()
    raise typer.Exit(code)
