"""`pd-doctor report`: build the bundle to attach to a vLLM P/D bug report."""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vllm_pd_doctor.commands._common import (
    ConfigOpt,
    DebugOpt,
    DecodeCmdOpt,
    DecodeUrlsOpt,
    ModelOpt,
    Options,
    PrefillCmdOpt,
    PrefillUrlsOpt,
    PythonOpt,
    QuietOpt,
    TimeoutOpt,
    VllmOpt,
    command,
    interpreter,
    out,
    progress_printer,
)
from vllm_pd_doctor.infra import limits
from vllm_pd_doctor.infra.errors import BadInput, ExitCode

if TYPE_CHECKING:
    from vllm_pd_doctor.report.bundle import ReportInputs

HELP = """Build the bundle to attach to a vLLM bug report about P/D disaggregation.

Writes a bundle meant for posting, public by construction: report.md (laid out for vLLM's bug
template: the verdict first; environment from vLLM's own collector plus NIXL/UCX versions and
variables; the #53514 repro verdict; check-config findings; the launch commands; the log lines
that matter), report.json (the same, schema_version 1; its repro and check_config are what those
commands print with --format json) and repro/, a standalone reproduction (`python
repro/run_repro.py`, needs only vLLM). Only facts of known-safe kinds are kept (versions, flag
names, values of non-secret flags, model architecture, verdicts, vLLM frames); every other value
is a stable placeholder (<host-1>, <value-3>). --private adds verbatim copies of the inputs
(raw/: config, logs, collect_env, JSON traces; secrets, hosts and addresses still redacted) and
names the bundle *-PRIVATE: for sending to a maintainer privately, never for posting.
An existing output is never overwritten unless --force (FILE.zip only) and never written through
a symlink. A collector that fails or times out is shown as "could not collect: why". Prints the
bundle's path on stdout.

Exit codes: 0 bundle written (repro did not fire), 1 bundle written and the repro fired or
check-config has an error-level finding, 2 bad input, 3 could not run.
"""


def _private_name(dest: Path) -> Path:
    """A private bundle's name always says so (`x-PRIVATE`, `x-PRIVATE.zip`)."""
    if "PRIVATE" in dest.name:
        return dest
    if dest.suffix == ".zip":
        return dest.with_name(f"{dest.stem}-PRIVATE.zip")
    return dest.with_name(f"{dest.name}-PRIVATE")


def _check_dest(dest: Path, *, force: bool) -> None:
    """Refuse a bad output before collecting (safeio refuses it again when writing): a symlink
    (or a planted `.part` link), an existing FILE.zip without --force, a non-empty directory,
    a parent that cannot be written."""
    from vllm_pd_doctor.infra import safeio

    safeio.check_bundle_dest(dest, force=force)
    parent = dest.parent
    try:
        parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=parent):
            pass
    except OSError as exc:
        raise BadInput(
            f"-o {dest}: {parent} is not a writable directory ({exc.strerror or exc})",
            hint="choose an output path you can write to",
        ) from None


LogOpt = Annotated[
    list[Path] | None,
    typer.Option("--log", help="A log of the prefill or decode instance (repeatable).", show_default=False),
]
ReproOpt = Annotated[
    bool, typer.Option("--repro/--no-repro", help="Run the in-process #53514 repro (about 7 s).")
]
OutputOpt = Annotated[
    Path | None,
    typer.Option(
        "--output",
        "-o",
        help="Bundle directory, or FILE.zip (default: ./pd-doctor-report-<time>).",
        show_default=False,
    ),
]
RedactHostsOpt = Annotated[
    bool,
    typer.Option(
        "--redact-hosts/--no-redact-hosts", help="Redact host names and IP addresses other than loopback."
    ),
]
ForceOpt = Annotated[
    bool, typer.Option("--force", help="Replace an existing FILE.zip (a directory is never replaced).")
]
RedactExtraOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--redact-extra",
        metavar="REGEX",
        help="Also redact what this regular expression matches (group 1 if it has one), "
        "in every file and file name of the bundle (repeatable).",
        show_default=False,
    ),
]
PrivateOpt = Annotated[
    bool,
    typer.Option(
        "--private",
        help="Also include verbatim copies of the config, logs and traces (raw/); the bundle "
        "is named *-PRIVATE and is not for posting.",
    ),
]
OPTIONS: Options = {
    "prefill_cmd": (PrefillCmdOpt, None),
    "decode_cmd": (DecodeCmdOpt, None),
    "prefill_url": (PrefillUrlsOpt, None),
    "decode_url": (DecodeUrlsOpt, None),
    "config": (ConfigOpt, None),
    "model": (ModelOpt, None),
    "python": (PythonOpt, None),
    "vllm": (VllmOpt, None),
    "log": (LogOpt, None),
    "repro": (ReproOpt, True),
    "output": (OutputOpt, None),
    "redact_hosts": (RedactHostsOpt, True),
    "timeout": (TimeoutOpt, 300.0),
    "force": (ForceOpt, False),
    "redact_extra": (RedactExtraOpt, None),
    "private": (PrivateOpt, False),
    "quiet": (QuietOpt, False),
    "debug": (DebugOpt, False),
}


def _check(v: Mapping[str, Any]) -> None:
    """Refuse bad input before any work: one line, exit 2."""
    from vllm_pd_doctor.knowledge.models import resolve as models
    from vllm_pd_doctor.report import redact

    redact.compile_extra(tuple(v["redact_extra"] or ()))  # a bad pattern is one line, exit 2
    if v["config"] is not None:  # exists, regular, bounded, UTF-8, no alias bomb
        from vllm_pd_doctor.deployment import reader

        reader.check_config_file(v["config"])
    for p in v["log"] or ():  # no devices, FIFOs, sockets, missing files (exit 2, no hang)
        limits.check_input_file(p, f"--log {p}", max_bytes=limits.ANY_SIZE)
    if v["model"] is not None:
        models.resolve(str(v["model"]))  # the one resolver: a clear line for a model it cannot find
    if v["timeout"] <= 0:
        raise BadInput(f"--timeout {v['timeout']}: must be positive")
    from vllm_pd_doctor.deployment.urls import check_url

    for flag in ("prefill_url", "decode_url"):
        for u in v[flag] or ():
            check_url(u, "--" + flag.replace("_", "-"))


def _dest(v: Mapping[str, Any]) -> Path:
    """Where the bundle goes (a private one's name says so), checked before collecting."""
    output = v["output"]
    dest = output if output is not None else Path(f"pd-doctor-report-{time.strftime('%Y%m%d-%H%M%S')}")
    dest = _private_name(dest.expanduser()) if v["private"] else dest.expanduser()
    _check_dest(dest, force=v["force"])
    return dest


def inputs_of(v: Mapping[str, Any], python: str) -> ReportInputs:
    """The command's options as the report's inputs."""
    from vllm_pd_doctor.report.bundle import ReportInputs

    config, model = v["config"], v["model"]
    return ReportInputs(
        python=python,
        prefill_cmd=v["prefill_cmd"],
        decode_cmd=v["decode_cmd"],
        config=config.expanduser() if config else None,
        model=model.expanduser() if model else None,
        logs=tuple(v["log"] or ()),
        repro=v["repro"],
        redact_hosts=v["redact_hosts"],
        timeout=v["timeout"],
        environ=dict(os.environ),
        home=os.environ.get("HOME") or str(Path.home()),
        redact_extra=tuple(v["redact_extra"] or ()),
        private=v["private"],
        prefill_urls=tuple(v["prefill_url"] or ()),
        decode_urls=tuple(v["decode_url"] or ()),
    )


def _report(v: dict[str, Any]) -> int:
    from vllm_pd_doctor.report import bundle

    progress = progress_printer(not v["quiet"])
    _check(v)
    dest = _dest(v)
    inputs = inputs_of(v, interpreter(v["python"], v["vllm"], None, progress))
    gathered = bundle.gather(inputs, progress)
    doc, files = bundle.build(inputs, gathered)
    try:
        written = bundle.write(dest, files, force=v["force"])
    except OSError as exc:
        raise BadInput(f"-o {dest}: cannot write ({exc.strerror or exc})") from None
    raw = sorted(f for f in files if f.startswith("raw/"))
    if raw:
        progress("PRIVATE bundle, not for posting; verbatim copies included: " + ", ".join(raw))
    progress(
        f"wrote {len(files)} files; "
        + "; ".join(f"{c.name}: could not collect" for c in doc.collectors if not c.ok)
    )
    out(f"{written}\n")
    return ExitCode.FOUND if doc.exit_code == 1 else ExitCode.OK


report = command("report", OPTIONS, _report)


def register(app: typer.Typer) -> None:
    app.command("report", help=HELP)(report)
