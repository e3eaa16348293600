"""`pd-doctor report`: build the bundle to attach to a vLLM P/D bug report."""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Annotated

import typer

from vllm_pd_doctor import limits
from vllm_pd_doctor.commands._common import (
    DebugOpt,
    PythonOpt,
    VllmOpt,
    interpreter,
    out,
    progress_printer,
    run,
)
from vllm_pd_doctor.errors import BadInput, ExitCode
from vllm_pd_doctor.limits import positive_seconds

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


def register(app: typer.Typer) -> None:
    app.command("report", help=HELP)(report)


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
    from vllm_pd_doctor import safeio

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


def report(
    prefill_cmd: Annotated[
        str | None,
        typer.Option(
            "--prefill-cmd", help="The prefill instance's launch command (one string).", show_default=False
        ),
    ] = None,
    decode_cmd: Annotated[
        str | None,
        typer.Option(
            "--decode-cmd", help="The decode instance's launch command (one string).", show_default=False
        ),
    ] = None,
    prefill_url: Annotated[
        list[str] | None,
        typer.Option(
            "--prefill-url", help="A running prefill's base URL: add a status snapshot.", metavar="URL"
        ),
    ] = None,
    decode_url: Annotated[
        list[str] | None,
        typer.Option(
            "--decode-url", help="A running decode's base URL: add a status snapshot.", metavar="URL"
        ),
    ] = None,
    config: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="A file with the launch commands, in any form check-config --config "
            "reads (text, YAML/JSON, shell script, manifests).",
            show_default=False,
        ),
    ] = None,
    model: Annotated[
        Path | None,
        typer.Option("--model", help="Directory with the model's config.json.", show_default=False),
    ] = None,
    python: PythonOpt = None,
    vllm: VllmOpt = None,
    log: Annotated[
        list[Path] | None,
        typer.Option(
            "--log", help="A log of the prefill or decode instance (repeatable).", show_default=False
        ),
    ] = None,
    repro: Annotated[
        bool, typer.Option("--repro/--no-repro", help="Run the in-process #53514 repro (about 7 s).")
    ] = True,
    output: Annotated[
        Path | None,
        typer.Option(
            "--output",
            "-o",
            help="Bundle directory, or FILE.zip (default: ./pd-doctor-report-<time>).",
            show_default=False,
        ),
    ] = None,
    redact_hosts: Annotated[
        bool,
        typer.Option(
            "--redact-hosts/--no-redact-hosts", help="Redact host names and IP addresses other than loopback."
        ),
    ] = True,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout", help="Seconds each collector may take.", callback=positive_seconds("--timeout")
        ),
    ] = 300.0,
    force: Annotated[
        bool, typer.Option("--force", help="Replace an existing FILE.zip (a directory is never replaced).")
    ] = False,
    redact_extra: Annotated[
        list[str] | None,
        typer.Option(
            "--redact-extra",
            metavar="REGEX",
            help="Also redact what this regular expression matches (group 1 if it has one), "
            "in every file and file name of the bundle (repeatable).",
            show_default=False,
        ),
    ] = None,
    private: Annotated[
        bool,
        typer.Option(
            "--private",
            help="Also include verbatim copies of the config, logs and traces (raw/); the bundle "
            "is named *-PRIVATE and is not for posting.",
        ),
    ] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr.")] = False,
    debug: DebugOpt = False,
) -> None:

    progress = progress_printer(not quiet)

    def body() -> int:
        from vllm_pd_doctor.report import bundle, redact

        extra = tuple(redact_extra or ())
        redact.compile_extra(extra)  # a bad pattern is one line, exit 2, before any work

        if config is not None and (prefill_cmd or decode_cmd):
            raise BadInput(
                "--config and --prefill-cmd/--decode-cmd both given", hint="give the commands one way"
            )
        if config is not None:  # exists, regular, bounded, UTF-8, no alias bomb
            limits.check_input_file(
                config, f"--config {config}", max_bytes=limits.MAX_CONFIG_BYTES, yaml_text=True
            )
        for p in log or ():  # no devices, FIFOs, sockets, missing files (exit 2, no hang)
            limits.check_input_file(p, f"--log {p}", max_bytes=limits.ANY_SIZE)
        if model is not None and not model.expanduser().exists():
            raise BadInput(f"--model {model}: no such directory")
        if timeout <= 0:
            raise BadInput(f"--timeout {timeout}: must be positive")
        from vllm_pd_doctor.status.core import check_url

        p_urls = tuple(check_url(u, "--prefill-url") for u in prefill_url or ())
        d_urls = tuple(check_url(u, "--decode-url") for u in decode_url or ())
        dest = output if output is not None else Path(f"pd-doctor-report-{time.strftime('%Y%m%d-%H%M%S')}")
        dest = _private_name(dest.expanduser()) if private else dest.expanduser()
        _check_dest(dest, force=force)
        target = interpreter(python, vllm, None, progress)
        inputs = bundle.ReportInputs(
            python=target,
            prefill_cmd=prefill_cmd,
            decode_cmd=decode_cmd,
            config=config.expanduser() if config else None,
            model=model.expanduser() if model else None,
            logs=tuple(log or ()),
            repro=repro,
            redact_hosts=redact_hosts,
            timeout=timeout,
            environ=dict(os.environ),
            home=os.environ.get("HOME") or str(Path.home()),
            redact_extra=extra,
            private=private,
            prefill_urls=p_urls,
            decode_urls=d_urls,
        )
        gathered = bundle.gather(inputs, progress)
        doc, files = bundle.build(inputs, gathered)
        try:
            written = bundle.write(dest, files, force=force)
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

    run(body, debug=debug)
