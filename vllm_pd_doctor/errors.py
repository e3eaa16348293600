"""One exception base, named exit codes, and the one boundary that maps errors to them."""

from __future__ import annotations

import sys
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from enum import IntEnum


class ExitCode(IntEnum):
    """Exit codes of every pd-doctor command (documented in --help and the README)."""

    OK = 0
    """Nothing found: the bug did not fire / no error-level finding."""
    FOUND = 1
    """The problem was found: the assertion fired / an error-level finding."""
    BAD_INPUT = 2
    """The command line or an input file is wrong; nothing was run."""
    COULD_NOT_RUN = 3
    """The check could not run: no vLLM there, internals it cannot drive, an engine that
    would not start."""
    INTERNAL = 4
    """A bug in pd-doctor itself (rerun with --debug and report it)."""
    HANGUP = 129
    """Stopped by SIGHUP (the terminal went away); everything pd-doctor started was stopped."""
    INTERRUPTED = 130
    """Stopped by Ctrl-C (SIGINT); everything pd-doctor started was stopped."""
    TERMINATED = 143
    """Stopped by SIGTERM; everything pd-doctor started was stopped."""


class PdDoctorError(Exception):
    """Base of every error pd-doctor reports to a user as one clear line."""

    exit_code: ExitCode = ExitCode.COULD_NOT_RUN

    def __init__(self, message: str, *, hint: str | None = None, detail: str | None = None):
        super().__init__(message)
        self.message = message
        self.hint = hint
        self.detail = detail
        """Longer material (a log tail, a traceback from the target process) for --debug."""


class BadInput(PdDoctorError):
    """The user's input is wrong: what, where, how to fix."""

    exit_code = ExitCode.BAD_INPUT


class CouldNotRun(PdDoctorError):
    """The environment or the target cannot do what was asked."""

    exit_code = ExitCode.COULD_NOT_RUN


_debug = False


def set_debug(on: bool) -> None:
    """--debug (or PD_DOCTOR_DEBUG) was given: errors show their traceback and detail."""
    global _debug
    _debug = _debug or on


def debug_enabled() -> bool:
    return _debug


def _say(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def report_error(exc: BaseException, *, debug: bool) -> ExitCode:
    """Print one clear line (plus a hint) for an error; return its exit code."""
    if isinstance(exc, PdDoctorError):
        _say(f"pd-doctor: error: {exc.message}")
        if exc.hint:
            _say(f"  hint: {exc.hint}")
        if debug:
            if exc.detail:
                _say(exc.detail.rstrip())
            _say("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip())
        elif exc.detail:
            _say("  (run with --debug for details)")
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        from vllm_pd_doctor import procs

        if isinstance(exc, procs.Interrupted):
            _say(f"pd-doctor: stopped by {exc}")
            return ExitCode(exc.exit_code)
        _say("pd-doctor: interrupted")
        return ExitCode.INTERRUPTED
    _say(f"pd-doctor: internal error: {type(exc).__name__}: {exc}")
    if debug:
        _say("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip())
    else:
        _say("  hint: this is a bug in pd-doctor; rerun with --debug and report the traceback")
    return ExitCode.INTERNAL


@contextmanager
def boundary(*, debug: bool) -> Iterator[None]:
    """Exceptions inside become exit codes (raises SystemExit): for callers outside `cli.main`,
    which applies `report_error` to every command itself."""
    try:
        yield
    except SystemExit:
        raise
    except BaseException as exc:
        code = report_error(exc, debug=debug)
        raise SystemExit(int(code)) from None
