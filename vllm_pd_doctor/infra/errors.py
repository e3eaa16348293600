"""One exception base, named exit codes, and the one boundary that maps errors to them."""

from __future__ import annotations

import errno
import sys
import traceback
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from enum import IntEnum

from vllm_pd_doctor.infra.sanitize import line, text


class ExitCode(IntEnum):
    """Exit codes of every pd-doctor command (documented in --help, the README and docs/exit-codes.md)."""

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


class FieldError(BadInput):
    """A core refuses one of its inputs: which `fields` (the core's names, e.g. `block_size`), the
    value given and why, without the command line's words.

    `message` and `hint` are templates: `{flag}` (the first field's flag), `{0}`, `{1}`... (each
    field's flag) and `{value}`. The command that took the input words them with its own flags
    (`commands._common.worded`, one field -> flag table per command); called outside a command, a
    field is spelt as its usual flag (`block_size` -> `--block-size`).
    """

    def __init__(
        self,
        fields: str | tuple[str, ...],
        message: str,
        *,
        value: object = None,
        hint: str | None = None,
        usual: Mapping[str, str] | None = None,
    ):
        self.fields = (fields,) if isinstance(fields, str) else tuple(fields)
        self.usual = dict(usual or {})
        """The usual flag of a field whose name does not spell it (outside a command)."""
        self.value = value
        self.template, self.hint_template = message, hint
        msg, h = self.words({})
        super().__init__(msg, hint=h)

    def words(self, flags: Mapping[str, str]) -> tuple[str, str | None]:
        """(message, hint) with each field named by `flags` (else its usual flag)."""
        named = [flags.get(f) or self.usual.get(f) or "--" + f.replace("_", "-") for f in self.fields]
        fill = {"flag": named[0], "value": self.value}

        def fmt(t: str) -> str:
            return t.format(*named, **fill)

        return fmt(self.template), (fmt(self.hint_template) if self.hint_template else None)

    def worded(self, flags: Mapping[str, str]) -> BadInput:
        """The same refusal worded with a command's flags."""
        msg, h = self.words(flags)
        return BadInput(msg, hint=h, detail=self.detail)


def literal(text: object) -> str:
    """`text` as it reads inside a `FieldError` template (its braces kept, never a placeholder)."""
    return str(text).replace("{", "{{").replace("}", "}}")


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
    try:
        print(text(line), file=sys.stderr, flush=True)
    except (OSError, ValueError):  # stderr closed or full: the exit code still tells
        pass


_OS_HINTS = {
    errno.ENOSPC: "free some space, or set PD_DOCTOR_HOME to a file system with room",
    errno.EDQUOT: "free some space, or set PD_DOCTOR_HOME to a file system with room",
    errno.EROFS: "set PD_DOCTOR_HOME (and -o) to a writable directory",
    errno.EACCES: "set PD_DOCTOR_HOME (and -o) to a directory you can write to",
    errno.EPERM: "set PD_DOCTOR_HOME (and -o) to a directory you can write to",
    errno.ENAMETOOLONG: "give a shorter path",
    errno.ENOTDIR: "a part of the path is a file, not a directory",
    errno.EBADF: "give pd-doctor open standard streams (e.g. >/dev/null rather than >&-)",
}


def from_environment(exc: BaseException) -> PdDoctorError | None:
    """The user-facing error for an exception that comes from the machine or the input, not
    from a bug: an OS error (a full or read-only disk, a closed stream, a name too long), no
    memory left, an integer with more digits than Python converts. None for anything else."""
    if isinstance(exc, OSError):
        name = str(exc.filename or "")
        where = f": {name if len(name) <= 200 else name[:100] + '...' + name[-80:]}" if name else ""
        what = exc.strerror or type(exc).__name__
        return CouldNotRun(
            f"{what}{where}", hint=_OS_HINTS.get(exc.errno or 0, "check the path and the disk it is on")
        )
    if isinstance(exc, MemoryError):
        return CouldNotRun("out of memory", hint="give a smaller input, or free memory")
    if isinstance(exc, ValueError) and "integer string conversion" in str(exc):
        return BadInput(
            "an integer in the input has more digits than pd-doctor reads (4300)",
            hint="give numbers of a sensible size",
        )
    return None


def report_error(exc: BaseException, *, debug: bool) -> ExitCode:
    """Print one clear line (plus a hint) for an error; return its exit code."""
    mapped = from_environment(exc)
    if mapped is not None:
        if debug:
            _say("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip())
        exc = mapped
    if isinstance(exc, PdDoctorError):
        _say(f"pd-doctor: error: {line(exc.message)}")
        if exc.hint:
            _say(f"  hint: {line(exc.hint)}")
        if debug:
            if exc.detail:
                _say(exc.detail.rstrip())
            _say("".join(traceback.format_exception(type(exc), exc, exc.__traceback__)).rstrip())
        elif exc.detail:
            _say("  (run with --debug for details)")
        return exc.exit_code
    if isinstance(exc, KeyboardInterrupt):
        from vllm_pd_doctor.infra import procs

        if isinstance(exc, procs.Interrupted):
            _say(f"pd-doctor: stopped by {exc}")
            return ExitCode(exc.exit_code)
        _say("pd-doctor: interrupted")
        return ExitCode.INTERRUPTED
    _say(f"pd-doctor: internal error: {type(exc).__name__}: {line(str(exc))[:500]}")
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
