"""The `pd-doctor` command line: parses, dispatches to commands/*, nothing else.

Subcommands come from `COMMANDS`, a `{name: module}` table (as vLLM's own CLI keeps its command
modules): a run of one command imports and builds that command's module alone (`build_app(only)`);
`--help` and `cli.app` build them all. A module adds its command(s) through `register(app)`. Adding
a subcommand is one line there (and in `_ORDER`) and its module.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable, Sequence
from contextlib import suppress
from enum import Enum
from pathlib import PurePath
from typing import Any

import typer

from vllm_pd_doctor import __version__
from vllm_pd_doctor.infra import procs, safeio
from vllm_pd_doctor.infra.errors import debug_enabled, report_error
from vllm_pd_doctor.infra.sanitize import line

EXIT_CODES_HELP = (
    "Exit codes: 0 not reproduced / nothing found, 1 reproduced / error-level finding, "
    "2 bad input, 3 could not run, 4 internal error, 129/130/143 stopped by SIGHUP/SIGINT/SIGTERM."
)

COMMANDS = {
    "repro": "repro",
    "check-config": "check_config",
    "report": "report",
    "matrix": "matrix",
    "bisect": "matrix",
    "triage": "triage",
    "status": "status",
    "envs": "envs",
    "hotfix": "hotfix",
}
"""Command name -> the module under `commands/` that registers it, in the order `--help` lists
them (typer lists single commands before groups; tests/commands/test_cli_help.py checks that each module
registers exactly these, tests/commands/test_cli_table.py the order)."""
_ORDER = ("repro", "check_config", "report", "matrix", "envs", "hotfix", "triage", "status")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"pd-doctor {__version__}")
        raise typer.Exit()


def _main(
    version: bool = typer.Option(
        False, "--version", callback=_version, is_eager=True, help="Print pd-doctor's version and exit."
    ),
) -> None:
    """pd-doctor: P/D disaggregation doctor for vLLM."""


def build_app(only: str | None = None) -> typer.Typer:
    """The typer app with every command, or only the module of command `only` (a run of one
    command imports and builds that command alone: start-up time)."""
    new = typer.Typer(
        name="pd-doctor",
        help="Diagnose and reproduce vLLM prefill/decode (P/D) disaggregation failures over the NIXL "
        "KV connector, starting with the P-side N-1 truncation crash (vLLM #53514).\n\n" + EXIT_CODES_HELP,
        no_args_is_help=True,
        add_completion=True,
        pretty_exceptions_enable=False,
        rich_markup_mode="markdown",
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    new.callback()(_main)
    for name in (COMMANDS[only],) if only in COMMANDS else _ORDER:
        importlib.import_module(f"vllm_pd_doctor.commands.{name}").register(new)
    return new


def __getattr__(name: str) -> Any:  # `cli.app`: the full app, built on first use
    if name == "app":
        globals()["app"] = built = build_app()
        return built
    raise AttributeError(name)


def _invoked(argv: Sequence[str] | None) -> str | None:
    """The command a command line runs (its first word that is no option), if it is one."""
    args = list(sys.argv[1:] if argv is None else argv)
    first = next((a for a in args if not a.startswith("-")), None)
    return first if first in COMMANDS else None


# click's exceptions, wherever this typer keeps them (typer >= 0.17 vendors click as typer._click)
_click_exc = sys.modules[typer.BadParameter.__module__]
_UsageError: type[Exception] = _click_exc.UsageError
_ClickException: type[Exception] = _click_exc.ClickException
_NoArgsIsHelp: type[Exception] = getattr(_click_exc, "NoArgsIsHelpError", _UsageError)
_Abort: type[BaseException] = getattr(_click_exc, "Abort", typer.Abort)
_Exit: type[BaseException] = typer.Exit
_choice: Any
_path: Any
try:  # typer's own choice matching and path checks (typer >= 0.2x; no pydantic)
    from typer._param_types import coerce_cli_choice as _choice
    from typer._param_types import coerce_cli_path as _path
except ImportError:  # pragma: no cover - an older typer: click coerces, nothing to skip
    _choice = _path = None


def _usage_error(exc: Any) -> int:
    """A usage error (typer's and click's own included) as one line plus a hint, exit 2."""
    ctx = exc.ctx
    where = ctx.command_path if ctx is not None else "pd-doctor"
    message = line(" ".join(exc.format_message().split()).replace(": Value error, ", ": "))
    print(f"pd-doctor: error: {message}", file=sys.stderr)
    print(f"  hint: see `{where} --help`", file=sys.stderr, flush=True)
    return 2


def _guarded(invoke: Callable[[Any], Any]) -> Callable[[Any], Any]:
    """The one error boundary of every command: a command raises, this prints one clear line
    (plus a hint; the traceback with --debug) and returns the error's exit code. Click's own
    exceptions (usage errors, --help, typer.Exit) pass through to `main`."""

    def run(ctx: Any) -> Any:
        try:
            return invoke(ctx)
        except (_ClickException, _Abort, _Exit, SystemExit):
            raise
        except BaseException as exc:
            return int(report_error(exc, debug=debug_enabled()))

    return run


class _LightCoercion:
    """Typer coerces every option value through a pydantic TypeAdapter; importing pydantic for
    that costs more than the rest of a check-config run. Values whose coercion is the identity
    (None, a value already of the option's type: a str for a str option, a default) or an enum's
    choice (typer's own choice matching) skip it; any other value goes to typer's coercion, so
    its conversions and messages are unchanged."""

    def __init__(self, build: Callable[[], Any]):
        self._build = build
        self._typer: Any = None

    def coerce(self, value: Any, param: Any, ctx: Any) -> Any:
        desc = param.type_descriptor
        ann = desc.annotation
        if value is None and (param.multiple or param.nargs == -1):
            return ()  # (typer's own answer to an absent multiple option)
        if (
            isinstance(ann, type)
            and desc.file_annotation is None
            and not (param.multiple or param.nargs != 1)
        ):
            if value is None or type(value) is ann:
                return value
            if issubclass(ann, PurePath) and isinstance(value, str) and desc.parameter_info.path_type is None:
                # typer's own path checks, given the value as a Path already (what its pydantic
                # adapter would make of a str): same checks and messages, no pydantic import
                return _path(ann(value), desc.parameter_info, path_type=ann, param=param, ctx=ctx)
            if issubclass(ann, Enum) and isinstance(value, str):
                with suppress(ValueError):
                    return _choice(value, choices=tuple(ann), case_sensitive=desc.case_sensitive, ctx=ctx)
        if self._typer is None:
            self._typer = self._build()
        return self._typer.coerce(value, param=param, ctx=ctx)


def _light_coercion(p: Any) -> None:
    """Install `_LightCoercion` on a typer parameter (where this typer coerces lazily)."""
    lazy = getattr(p, "_runtime_param", 0) is None and hasattr(p, "type_descriptor")
    if p is not None and lazy and _choice is not None:
        from typer._coercion import build_runtime_param

        p._runtime_param = _LightCoercion(lambda: build_runtime_param(p.type_descriptor))


def _metavars(cmd: Any) -> None:
    """Real metavars in --help, where a command gave none (typer prints `<bool>`, `<str>`): none
    for a flag, the choices for a choice, else the option's name (`--run-dir` -> RUN_DIR)."""
    ctx = cmd.context_class(cmd, help_option_names=["-h", "--help"])
    for p in [*cmd.params, cmd.get_help_option(ctx)]:
        _light_coercion(p)
        if (
            p is None
            or p.metavar is not None
            or not getattr(p, "opts", None)
            or p.param_type_name != "option"
        ):
            continue
        if getattr(p, "is_flag", False):
            p.metavar = ""
        elif not getattr(getattr(p, "type_descriptor", None), "is_choice", False):
            long = max(p.opts, key=len).lstrip("-")
            p.metavar = long.upper().replace("-", "_") + ("..." if getattr(p, "multiple", False) else "")
    for sub in getattr(cmd, "commands", {}).values():
        _metavars(sub)


def command(only: str | None = None) -> Any:
    """The click command `main` runs: typer's, with the error boundary and tidy help (with
    `only`, a command name: the app of that command alone)."""
    cmd = typer.main.get_command(build_app(only) if only in COMMANDS else __getattr__("app"))
    cmd.invoke = _guarded(cmd.invoke)  # type: ignore[method-assign,assignment]
    _metavars(cmd)
    return cmd


def main(argv: Sequence[str] | None = None) -> None:
    """The console script: one signal policy, one line per usage error, one error boundary.

    The last boundary too: whatever escapes a command body or typer itself (its --help or
    --version on a full disk or a closed stdout) is one line and exit 2/3/4, never a traceback."""
    safeio.prepare_stdio()
    procs.install()
    try:
        rc = _dispatch(argv)
    except (Exception, KeyboardInterrupt) as exc:
        rc = int(report_error(exc, debug=debug_enabled() or bool(os.environ.get("PD_DOCTOR_DEBUG"))))
    procs.closing()
    rc = safeio.finish_stdout(rc)
    signum = procs.stopped_by()
    if signum is not None:
        procs.finish(procs.EXIT_CODES.get(signum, 128 + signum))
    sys.exit(rc)


def _dispatch(argv: Sequence[str] | None) -> int:
    command_ = command(_invoked(argv))
    try:
        rc = command_.main(
            args=list(argv) if argv is not None else None, prog_name="pd-doctor", standalone_mode=False
        )
    except _NoArgsIsHelp as exc:  # typer has printed the help already
        rc = _usage_error(exc) if _NoArgsIsHelp is _UsageError else 0
    except _UsageError as exc:
        rc = _usage_error(exc)
    except _ClickException as exc:  # e.g. a file option that cannot be opened
        message = " ".join(exc.format_message().split()).replace(": Value error, ", ": ")  # type: ignore[attr-defined]
        print(f"pd-doctor: error: {line(message)}", file=sys.stderr)
        rc = int(getattr(exc, "exit_code", 2))
    except _Abort:
        rc = 130
    except SystemExit as exc:
        rc = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    return rc if isinstance(rc, int) else 0
