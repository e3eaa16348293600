"""`pd-doctor status`: is this running P/D deployment healthy? Read-only."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from vllm_pd_doctor.commands._common import (
    ConfigOpt,
    DebugOpt,
    DecodeCmdOpt,
    DecodeUrlsOpt,
    FormatOpt,
    PrefillCmdOpt,
    PrefillUrlsOpt,
    PythonOpt,
    QuietOpt,
    TimeoutOpt,
    progress_printer,
    run,
    show,
)
from vllm_pd_doctor.formats import OutputFormat
from vllm_pd_doctor.infra.errors import BadInput, ExitCode

if TYPE_CHECKING:
    from vllm_pd_doctor.results.status import StatusReport
    from vllm_pd_doctor.status.core import Endpoint

HELP = """Is this running P/D deployment healthy? Read-only, from its metrics and NIXL side channels.

Reads each engine's /health, /version, /v1/models and /metrics twice --interval apart (deltas,
not totals), asks each NIXL side channel for its handshake metadata the way a peer does (never a
transfer), compares prefill with decode (compatibility hash, block size, KV layout, TP) and names
what is wrong: not disaggregating, failed transfers, lease expiry, stuck fetches, pinned prefill
blocks, preemptions with remote KV, saturation (llm-d's thresholds), exposure to vLLM #53514.
Which metrics each release exposes comes from that release's source (--python: read now).

Endpoints: --prefill-url / --decode-url (any number each: xPyD) with --prefill-side-channel /
--decode-side-channel HOST:PORT in the same order, or the launch (--config / --prefill-cmd /
--decode-cmd, read as check-config reads it). A bearer token for secured endpoints:
PD_DOCTOR_STATUS_TOKEN (or VLLM_API_KEY); a CA bundle: PD_DOCTOR_STATUS_CA.

Example: `pd-doctor status --prefill-url http://10.0.0.5:8100 --decode-url http://10.0.0.6:8200
--prefill-side-channel 10.0.0.5:5600 --decode-side-channel 10.0.0.6:5601`

Exit codes: 0 healthy (no error-level finding), 1 an error-level finding, 2 bad input,
3 an engine did not answer (hung, dead, not vLLM): the report is printed all the same, with the
engines that answered judged and one finding per engine that did not.
"""


def register(app: typer.Typer) -> None:
    """Add the status subcommand to the app."""
    app.command("status", help=HELP)(status)


UrlsOpt = list[str] | None


def status(
    prefill_url: PrefillUrlsOpt = None,
    decode_url: DecodeUrlsOpt = None,
    prefill_side: Annotated[
        UrlsOpt,
        typer.Option(
            "--prefill-side-channel", help="A prefill's NIXL side channel HOST:PORT.", metavar="HOST:PORT"
        ),
    ] = None,
    decode_side: Annotated[
        UrlsOpt,
        typer.Option(
            "--decode-side-channel", help="A decode's NIXL side channel HOST:PORT.", metavar="HOST:PORT"
        ),
    ] = None,
    config: ConfigOpt = None,
    prefill_cmd: PrefillCmdOpt = None,
    decode_cmd: DecodeCmdOpt = None,
    interval: Annotated[
        float,
        typer.Option("--interval", help="Seconds between the two /metrics readings.", metavar="SECONDS"),
    ] = 2.0,
    timeout: TimeoutOpt = 5.0,
    watch: Annotated[
        bool, typer.Option("--watch", help="Re-read and redraw every --interval (Ctrl-C ends).")
    ] = False,
    python: PythonOpt = None,
    fmt: FormatOpt = OutputFormat.table,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> None:
    def body() -> int:
        if not 0 < interval <= 3600:
            raise BadInput(
                f"--interval {interval:g}: must be above 0 and at most 3600 seconds", hint="e.g. 2"
            )
        if not 0 < timeout <= 600:
            raise BadInput(f"--timeout {timeout:g}: must be above 0 and at most 600 seconds", hint="e.g. 5")
        endpoints = _endpoints(
            prefill_url, decode_url, prefill_side, decode_side, config, prefill_cmd, decode_cmd, python
        )
        return _run(endpoints, interval, timeout, python, watch=watch, fmt=fmt, quiet=quiet)

    run(body, debug=debug)


def _run(
    endpoints: list[Endpoint],
    interval: float,
    timeout: float,
    python: Path | None,
    *,
    watch: bool,
    fmt: OutputFormat,
    quiet: bool,
) -> int:
    from vllm_pd_doctor.status import core

    vllm_dir = _vllm_dir(python) if python is not None else None
    if watch:
        return _watch(endpoints, interval, timeout, vllm_dir, fmt)
    progress = progress_printer(not quiet)
    report = core.run_status(endpoints, interval, timeout=timeout, python_vllm=vllm_dir, progress=progress)
    show(report, fmt)
    return exit_code(report)


def exit_code(report: StatusReport) -> ExitCode:
    """3 when an engine did not answer (the report is printed all the same), else 1 on an
    error-level finding, else 0."""
    if report.unanswered:
        return ExitCode.COULD_NOT_RUN
    return ExitCode.FOUND if report.errors else ExitCode.OK


def _endpoints(
    p_urls: list[str] | None,
    d_urls: list[str] | None,
    p_side: list[str] | None,
    d_side: list[str] | None,
    config: Path | None,
    prefill_cmd: str | None,
    decode_cmd: str | None,
    python: Path | None,
) -> list[Endpoint]:
    from vllm_pd_doctor.deployment.urls import check_url, parse_side
    from vllm_pd_doctor.status import core as c

    if p_urls or d_urls:
        if config or prefill_cmd or decode_cmd:
            raise BadInput("give either URLs or the launch (--config/--prefill-cmd/--decode-cmd), not both")
        if not p_urls or not d_urls:
            raise BadInput("status needs at least one --prefill-url and one --decode-url")
        out: list[Endpoint] = []
        for role, urls, sides in (("prefill", p_urls, p_side or []), ("decode", d_urls, d_side or [])):
            if len(sides) > len(urls):
                raise BadInput(
                    f"more --{role}-side-channel than --{role}-url", hint="give them in the same order"
                )
            for i, u in enumerate(urls):
                side = parse_side(sides[i], f"--{role}-side-channel") if i < len(sides) else None
                out.append(c.Endpoint(role, check_url(u, f"--{role}-url"), side))
        return out
    if config or prefill_cmd or decode_cmd:
        return list(c.from_launch(config, prefill_cmd, decode_cmd, str(python) if python else None))
    raise BadInput(
        "no endpoints", hint="give --prefill-url and --decode-url, or --config / --prefill-cmd / --decode-cmd"
    )


def _vllm_dir(python: Path) -> Path:
    from vllm_pd_doctor.infra import targetrun
    from vllm_pd_doctor.infra.errors import CouldNotRun

    interp = targetrun.probe_interpreter(targetrun.resolve_python(str(python)))
    if interp.vllm_path is None:
        raise CouldNotRun(f"--python {python}: no vLLM installed there")
    return Path(interp.vllm_path)


def _watch(
    endpoints: list[Endpoint], interval: float, timeout: float, vllm_dir: Path | None, fmt: OutputFormat
) -> int:
    """Re-read every --interval until Ctrl-C: redrawn in place on a terminal (rich Live), one
    report after another in --format otherwise (a pipe, a file)."""
    from rich.live import Live
    from rich.text import Text

    from vllm_pd_doctor.commands._common import stdout_color, stdout_width
    from vllm_pd_doctor.formats import emit
    from vllm_pd_doctor.status import core as c

    def one() -> StatusReport:
        return c.run_status(endpoints, interval, timeout=timeout, python_vllm=vllm_dir)

    if not sys.stdout.isatty():
        while True:
            show(one(), fmt)
    with Live(Text("reading..."), refresh_per_second=2, screen=False) as live:
        while True:
            table = emit(one(), OutputFormat.table, width=stdout_width(), color=stdout_color())
            live.update(Text.from_ansi(table))
