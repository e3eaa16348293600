"""`pd-doctor check-config`: is this P/D deployment exposed to vLLM #53514, and what else breaks?"""

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
    VllmOpt,
    hint,
    progress_printer,
    show,
)
from vllm_pd_doctor.formats import OutputFormat
from vllm_pd_doctor.infra.errors import BadInput, ExitCode

HELP = """Check a P/D launch (prefill + decode commands) for vLLM #53514 and known P/D pitfalls.

Reads the launch commands (--config FILE, and/or --prefill-cmd/--decode-cmd, each replacing the
file's server of that role), the model's config.json (--model, or the model the commands name)
and the installed vLLM's source and NIXL packages (--python, default this interpreter) without
importing vLLM or torch.
The exposure verdict comes from where the installed vLLM calls its P-side truncation helper
(file:line). --probe also runs the in-process repro (imports vLLM in a child; seconds).

Exit codes: 0 no error-level finding, 1 at least one (exposure counts; with --strict an
unknown exposure too), 2 bad input, 3 could not run.

Example: `pd-doctor check-config --config deploy.yaml --python ENV/bin/python --format json`
"""


def register(app: typer.Typer) -> None:
    """Add the check-config subcommand to the app."""
    app.command("check-config", help=HELP)(check_config)


SetOpt = Annotated[
    list[str] | None,
    typer.Option(
        "--set",
        help="VAR=VALUE for a shell variable the config file uses but does not set (repeatable).",
        show_default=False,
        metavar="VAR=VALUE",
    ),
]
ProbeOpt = Annotated[
    bool, typer.Option("--probe", help="Also run the in-process repro in the target interpreter.")
]
StrictOpt = Annotated[
    bool,
    typer.Option("--strict", help="Exit 1 when the #53514 exposure is unknown (e.g. model not resolvable)."),
]
ListRulesOpt = Annotated[bool, typer.Option("--list-rules", help="Print the rule catalogue and exit.")]


def _variables(set_vars: list[str] | None) -> dict[str, str]:
    """--set VAR=VALUE (repeatable) as a mapping."""
    variables: dict[str, str] = {}
    for item in set_vars or []:
        k, eq, v = item.partition("=")
        if not eq or not k.strip():
            raise BadInput(f"--set {item}: expected VAR=VALUE")
        variables[k.strip()] = v
    return variables


def check_config(
    prefill_cmd: PrefillCmdOpt = None,
    decode_cmd: DecodeCmdOpt = None,
    config: ConfigOpt = None,
    model: ModelOpt = None,
    set_vars: SetOpt = None,
    python: PythonOpt = None,
    vllm: VllmOpt = None,
    probe: ProbeOpt = False,
    strict: StrictOpt = False,
    list_rules: ListRulesOpt = False,
    fmt: FormatOpt = OutputFormat.table,
    quiet: QuietOpt = False,
    debug: DebugOpt = False,
) -> int:
    progress = progress_printer(not quiet)

    if list_rules:
        from vllm_pd_doctor.checkconfig.rules import RULES
        from vllm_pd_doctor.results.checkconfig import RuleCatalogue

        show(RuleCatalogue(RULES), fmt)
        return ExitCode.OK
    from vllm_pd_doctor.checkconfig import core
    from vllm_pd_doctor.deployment import reader

    if config is not None:  # exists, regular, bounded, UTF-8, no alias bomb
        reader.check_config_file(config)
    if python is not None and vllm is not None:
        raise BadInput("--python and --vllm both given", hint="use one of them")
    if probe is False and all(v is None for v in (prefill_cmd, decode_cmd, config, model, python, vllm)):
        raise BadInput(
            "nothing to check",
            hint="give --prefill-cmd/--decode-cmd, --config FILE, --model DIR or --python (see --help)",
        )
    interp = str(python) if python is not None else None
    if vllm is not None:
        from vllm_pd_doctor.repro import envs

        interp = str(envs.ensure(envs.default_package(), vllm, nixl=False, progress=progress).python)
    report = core.check(
        prefill_cmd=prefill_cmd,
        decode_cmd=decode_cmd,
        config=config,
        model=model,
        python=interp,
        import_nixl=vllm is None,
        release_env=vllm,
        probe=probe,
        variables=_variables(set_vars),
        progress=progress,
        warn=(lambda m: None) if quiet else hint,
    )
    show(report, fmt)
    unknown = strict and report.exposure.verdict == "unknown"
    return ExitCode.FOUND if report.has_error or unknown else ExitCode.OK
