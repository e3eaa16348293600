"""`pd-doctor triage LOG...`: name the cause of a P/D failure from its logs."""

from __future__ import annotations

from typing import Annotated

import typer

from vllm_pd_doctor.commands._common import (
    ConfigOpt,
    DebugOpt,
    DecodeCmdOpt,
    FormatOpt,
    ModelOpt,
    PrefillCmdOpt,
    PythonOpt,
    QuietOpt,
    hint,
    run,
    show,
)
from vllm_pd_doctor.formats import OutputFormat
from vllm_pd_doctor.infra.errors import BadInput, ExitCode

HELP = """Name the cause of a P/D failure from its logs (prefill, decode, or both interleaved).

Reads plain vLLM logs, `kubectl logs` (with --timestamps / --prefix), docker compose output,
Ray/EngineCore prefixes, JSON lines, ANSI colours, CRLF, `.gz` and `-` (stdin), streaming.
Each verdict names a failure class of the catalogue (`--list`), its confidence (decisive,
likely, possible), the evidence lines, what is missing to decide, the fix and the next
pd-doctor command. --python (the engine's vLLM), --model (its config.json) and
--config/--prefill-cmd (the connector) decide what the log alone cannot (vLLM #53514 is
decisive only for a hybrid model on a release that truncates late).

Example: `pd-doctor triage --prefill-log p.log --decode-log d.log --python ENV/bin/python --model MODEL_DIR`

Exit codes: 0 no known cause, 1 a cause found, 2 bad input, 3 could not run.
"""


def register(app: typer.Typer) -> None:
    """Add the triage subcommand to the app."""
    app.command("triage", help=HELP)(triage)


def triage(
    logs: Annotated[
        list[str] | None, typer.Argument(help="Log files (`.gz` too), or - for stdin.", show_default=False)
    ] = None,
    prefill_log: Annotated[
        list[str] | None,
        typer.Option("--prefill-log", help="A log of a prefill engine.", show_default=False, metavar="LOG"),
    ] = None,
    decode_log: Annotated[
        list[str] | None,
        typer.Option("--decode-log", help="A log of a decode engine.", show_default=False, metavar="LOG"),
    ] = None,
    config: ConfigOpt = None,
    prefill_cmd: PrefillCmdOpt = None,
    decode_cmd: DecodeCmdOpt = None,
    model: ModelOpt = None,
    python: PythonOpt = None,
    line: Annotated[
        list[str] | None,
        typer.Option(
            "--line",
            help="A log line as pasted (any shape: with or without the logger's prefix, an exception, "
            "a frame); repeat for more lines of one paste.",
            show_default=False,
            metavar="TEXT",
        ),
    ] = None,
    list_classes: Annotated[bool, typer.Option("--list", help="Print the failure classes and exit.")] = False,
    fmt: FormatOpt = OutputFormat.table,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    def body() -> int:
        from vllm_pd_doctor.triage import LogInput, check_inputs
        from vllm_pd_doctor.triage import triage as core
        from vllm_pd_doctor.triage.cli_context import build_context, catalogue

        if list_classes:
            show(catalogue(), fmt)
            return ExitCode.OK
        inputs = [LogInput(p) for p in logs or []]
        inputs += [LogInput(p, "prefill") for p in prefill_log or []]
        inputs += [LogInput(p, "decode") for p in decode_log or []]
        if line and inputs:
            raise BadInput(
                "--line is given with log files", hint="give the pasted line(s) or the logs, not both"
            )
        if not line:
            check_inputs(inputs)  # before --python is probed
        ctx = build_context(
            python=str(python) if python is not None else None,
            model=model,
            config=config,
            prefill_cmd=prefill_cmd,
            decode_cmd=decode_cmd,
        )
        if line:
            from vllm_pd_doctor.triage import triage_texts

            result = triage_texts([("--line", "\n".join(line))], ctx)
        else:
            result = core(inputs, ctx)
        if not quiet:
            for w in result.warnings:
                hint(w)
        show(result, fmt)
        return ExitCode.FOUND if result.verdicts else ExitCode.OK

    run(body, debug=debug)
