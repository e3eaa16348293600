"""The `pd-doctor` command line: parses, dispatches to commands/*, nothing else."""

from __future__ import annotations

import typer

from vllm_pd_doctor import __version__
from vllm_pd_doctor.commands import check_config, envs, hotfix, matrix, report, repro

EXIT_CODES_HELP = (
    "Exit codes: 0 not reproduced / nothing found, 1 reproduced / error-level finding, "
    "2 bad input, 3 could not run, 4 internal error, 130 interrupted."
)

app = typer.Typer(
    name="pd-doctor",
    help="Diagnose and reproduce vLLM prefill/decode (P/D) disaggregation failures over the NIXL "
    "KV connector, starting with the P-side N-1 truncation crash (vLLM #53514).\n\n"
    + EXIT_CODES_HELP,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode="markdown",
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"pd-doctor {__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                 help="Print pd-doctor's version and exit."),
) -> None:
    """pd-doctor: P/D disaggregation doctor for vLLM."""


for _module in (repro, check_config, report, matrix, envs, hotfix):
    _module.register(app)


def main() -> None:
    app(prog_name="pd-doctor")
