"""`pd-doctor repro`: does vLLM #53514 fire here, and which truncation path ran?"""

from __future__ import annotations

from collections.abc import Mapping
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from vllm_pd_doctor.commands._common import (
    CONNECTORS,
    DECODE_URL,
    PREFILL_URL,
    DebugOpt,
    FormatOpt,
    ModelOpt,
    Options,
    PackageOpt,
    PythonOpt,
    QuietOpt,
    Reporter,
    ScenarioOpt,
    TimeoutOpt,
    VllmOpt,
    command,
    flags_of,
    hint,
    interpreter,
    progress_printer,
    show,
    worded,
)
from vllm_pd_doctor.formats import OutputFormat
from vllm_pd_doctor.infra.errors import BadInput, CouldNotRun, ExitCode
from vllm_pd_doctor.knowledge.facts import examples
from vllm_pd_doctor.repro import request as scenario
from vllm_pd_doctor.repro.request import (
    REQUEST_FIELDS,
    Device,
    KvRole,
    MambaCacheMode,
    Platform,
    ReproRequest,
)

if TYPE_CHECKING:
    from vllm_pd_doctor.results.repro import ReproReport

HELP = """Reproduce vLLM #53514 (P-side N-1 truncation -> `assert num_new_tokens > 0`).

The default in-process engine builds vLLM's real Scheduler, the real KV connector scheduler
half and the real KV cache manager for a hybrid (attention + Mamba) model with prefix caching,
warms the prefix cache, then sends a P-side request (do_remote_decode) whose first N-1 tokens
are cached. It reports whether the assertion fired, which hook truncated the prompt and whether
that was before or after the local prefix-cache lookup, with vLLM's file:line. A control run
with an N-2 hit shows the failure is specific to the N-1 hit. No GPU, weights or network needed.

--engine live starts a real prefill and decode engine pair over NIXL (CPU or one GPU) with
pd-doctor's vLLM plugin tracing the scheduler, runs one complete P->D request, then sends the
trigger to the prefill engine and reports whether it died and which truncation path ran.
With --prefill-url [--decode-url] it probes existing engines instead (this may kill them).
--engine live --scenario abort-race,d-extra-block (or all) drives the scenarios a client can
trigger on a real pair (an abort while D's KV is in flight; a proxy appending P's first token)
and reports whether the decode engine died, where (its log's file:line), or survived.

Exit codes: 0 not reproduced, 1 reproduced (any connector), 2 bad input, 3 could not run.

Examples:

    pd-doctor repro --vllm {late} --connector all --format json

    pd-doctor repro --engine live --python ENV/bin/python --model nemotron-h
""".replace("{late}", examples.LATE)


class Engine(str, Enum):
    inprocess = "inprocess"
    live = "live"


def _complete_trigger(incomplete: str) -> list[str]:
    from vllm_pd_doctor.repro import inprocess

    return [t for t in (*inprocess.TRIGGERS, "all") if t.startswith(incomplete)]


def _opt(*names: str, help: str, metavar: str | None = None, **kw: object) -> typer.models.OptionInfo:
    option: typer.models.OptionInfo = typer.Option(
        *names,
        help=help,
        metavar=metavar,
        show_default=metavar is None,
        **kw,  # type: ignore[arg-type]
    )
    return option


EngineOpt = Annotated[
    Engine,
    _opt("--engine", help="inprocess: the real scheduler in one process; live: a real P/D pair over NIXL."),
]
ConnectorOpt = Annotated[str, CONNECTORS]
BlockSizeOpt = Annotated[
    int | None,
    _opt(
        "--block-size",
        help="Requested KV cache block size in tokens (default: the platform's; in-process, vLLM's own "
        "hybrid alignment then gives the effective block W; live: passed to the engines, or the remote "
        "block size; default: read from the prefill engine's /metrics).",
        metavar="TOKENS",
    ),
]
PromptLenOpt = Annotated[
    int | None,
    _opt("--prompt-len", help="Prompt length N (default W + 1, W the effective block size).", metavar="N"),
]
BlocksOpt = Annotated[
    int | None, _opt("--blocks", help="In-process: N = k x W + 1 (default k = 1).", metavar="K")
]
PrefixMatchUnitOpt = Annotated[
    int | None,
    _opt(
        "--prefix-match-unit",
        help="In-process: prefix-cache hash granularity in tokens, where the release has it "
        "(default: vLLM's).",
        metavar="TOKENS",
    ),
]
PlatformOpt = Annotated[
    Platform | None,
    _opt(
        "--platform",
        help="In-process: build the config and size the KV cache as this platform would (default: cuda "
        "for a CUDA build of vLLM, else cpu); cuda from a CPU box names every decision it could not "
        "take from vLLM.",
        metavar="cpu|cuda",
    ),
]
TriggerOpt = Annotated[
    str,
    typer.Option(
        "--trigger",
        help="In-process: same-prompt, shared-prefix, chunked, preempt, a comma list, or all.",
        metavar="TRIGGER[,TRIGGER...]|all",
        autocompletion=_complete_trigger,
    ),
]
MambaCacheModeOpt = Annotated[
    MambaCacheMode | None,
    _opt(
        "--mamba-cache-mode",
        help="none, align or all (default: vLLM's, which it rewrites to align with prefix caching).",
        metavar="none|align|all",
    ),
]
KvRoleOpt = Annotated[KvRole, _opt("--kv-role", help="kv_producer, kv_consumer or kv_both.")]
PrefillUrlOpt = Annotated[str | None, PREFILL_URL]
DecodeUrlOpt = Annotated[str | None, DECODE_URL]
ConfirmOpt = Annotated[
    bool,
    _opt(
        "--i-understand-this-may-kill-prefill", help="Needed for a --prefill-url that is not on this machine."
    ),
]
RunDirOpt = Annotated[
    Path | None,
    _opt(
        "--run-dir",
        help="Live: directory for the engines' logs and traces (default: a new one under pd-doctor's cache).",
        metavar="DIR",
    ),
]
PrefillPortOpt = Annotated[
    int | None,
    _opt(
        "--prefill-port", help="Live: HTTP port of the prefill engine (default: a free one).", metavar="PORT"
    ),
]
DecodePortOpt = Annotated[
    int | None,
    _opt("--decode-port", help="Live: HTTP port of the decode engine (default: a free one).", metavar="PORT"),
]
DeviceOpt = Annotated[
    Device | None,
    _opt(
        "--device",
        help="Live: cpu or cuda (default: cuda for a CUDA vLLM with a visible GPU).",
        metavar="cpu|cuda",
    ),
]
ListScenariosOpt = Annotated[
    bool, _opt("--list-scenarios", help="List the scenarios with their upstream references and exit.")
]
HotfixOpt = Annotated[
    bool,
    _opt(
        "--hotfix",
        help="Apply pd-doctor's opt-in #53514 backport (pd-doctor hotfix) first; "
        "the verdict says whether it fixed the release. With --scenario: each scenario's own "
        "hotfix (hybrid-load-failure, abort-race: not merged upstream).",
    ),
]


OPTIONS: Options = {
    # the common ones, then one per `ReproRequest` field (the request's field names)
    "python": (PythonOpt, None),
    "vllm": (VllmOpt, None),
    "package": (PackageOpt, None),
    "engine": (EngineOpt, Engine.inprocess),
    "connector": (ConnectorOpt, None),
    "block_size": (BlockSizeOpt, None),
    "prompt_len": (PromptLenOpt, None),
    "blocks": (BlocksOpt, None),
    "prefix_match_unit": (PrefixMatchUnitOpt, None),
    "platform": (PlatformOpt, None),
    "trigger": (TriggerOpt, "same-prompt"),
    "mamba_cache_mode": (MambaCacheModeOpt, None),
    "kv_role": (KvRoleOpt, KvRole.kv_producer),
    "model": (ModelOpt, None),
    "prefill_url": (PrefillUrlOpt, None),
    "decode_url": (DecodeUrlOpt, None),
    "confirm_remote": (ConfirmOpt, False),
    "run_dir": (RunDirOpt, None),
    "prefill_port": (PrefillPortOpt, None),
    "decode_port": (DecodePortOpt, None),
    "device": (DeviceOpt, None),
    "fmt": (FormatOpt, OutputFormat.table),
    "timeout": (TimeoutOpt, 600.0),
    "quiet": (QuietOpt, False),
    "hotfix": (HotfixOpt, False),
    "scenario": (ScenarioOpt, "n1-truncation"),
    "list_scenarios": (ListScenariosOpt, False),
    "debug": (DebugOpt, False),
}
FLAGS = flags_of(OPTIONS)
"""ReproRequest field -> the flag that sets it (the cores' `FieldError`s are worded with it)."""

INPROCESS_ONLY = (
    "--blocks, --prefix-match-unit, --platform and --trigger are options of the in-process engine"
)
LIVE_ONLY = (
    "--prefill-url, --decode-url, --run-dir, --prefill-port, --decode-port and --device are options "
    "of --engine live"
)


def request_of(values: Mapping[str, Any]) -> ReproRequest:
    """The command's options as the frozen request: choices as plain strings, the model as given."""
    kw: dict[str, Any] = {
        k: scenario.value(v) if isinstance(v, Enum) else v for k, v in values.items() if k in REQUEST_FIELDS
    }
    if kw.get("connector") is None:  # not given: the request's default (scenarios: every one they concern)
        kw.pop("connector", None)
    if kw.get("model") is not None:
        kw["model"] = str(kw["model"])
    return ReproRequest(**kw)


def _repro(values: dict[str, Any]) -> int:
    from vllm_pd_doctor.commands import _scenarios as scenario_cli

    progress = progress_printer(not values["quiet"])
    if values["list_scenarios"]:
        return scenario_cli.list_scenarios(values["fmt"])
    req = request_of(values)
    if scenario_cli.wants_scenarios(req.scenario):
        with worded(FLAGS):
            return _scenarios(req, values, progress)
    with worded(FLAGS):
        if req.engine == Engine.live.value:
            report, as_list = _live(req, values, progress)
        else:
            report, as_list = _inprocess(req, values, progress)
    show(report, values["fmt"], as_list=as_list)
    return _exit_code(report)


def _scenarios(req: ReproRequest, values: Mapping[str, Any], progress: Reporter) -> int:
    """Another P/D failure scenario than #53514's default run (`repro/scenarios/`; on a real pair with
    --engine live, for the ones a client can trigger: `repro/live/scenarios.py`)."""
    from vllm_pd_doctor.commands import _scenarios as scenario_cli

    if req.engine == Engine.live.value:
        if req.hotfix:
            raise BadInput(
                f"--scenario {req.scenario} --engine live: runs without --hotfix",
                hint=f"hotfixes are verified in-process: pd-doctor repro --scenario {req.scenario} --hotfix",
            )
        _only_with(INPROCESS_ONLY, req.given_of(scenario.INPROCESS_ONLY))
        return scenario_cli.run_live(req, values, progress)
    ids = scenario_cli.check_hotfix(req.scenario, req.hotfix)
    py = interpreter(values["python"], values["vllm"], values["package"], progress)
    return scenario_cli.run(
        py,
        ids,
        connector=values["connector"],
        model=values["model"],
        block_size=req.block_size,
        timeout=req.timeout,
        fmt=values["fmt"],
        progress=progress,
        hotfix=req.hotfix,
    )


def _live(req: ReproRequest, target: Mapping[str, Any], progress: Reporter) -> tuple[ReproReport, bool]:
    from vllm_pd_doctor.repro import live

    _only_with(INPROCESS_ONLY, req.given_of(scenario.INPROCESS_ONLY))
    lo = live.from_request(req)
    py = interpreter(target["python"], target["vllm"], target["package"], progress, nixl=not lo.remote)
    report = live.run_live(py, lo, progress)
    return report, "all" in (k.strip().lower() for k in req.connector.split(","))


def _inprocess(req: ReproRequest, target: Mapping[str, Any], progress: Reporter) -> tuple[ReproReport, bool]:
    from vllm_pd_doctor.repro import inprocess

    _only_with(LIVE_ONLY, req.given_of(scenario.LIVE_ONLY))
    opts = inprocess.options(req)
    py = interpreter(target["python"], target["vllm"], target["package"], progress)
    for w in opts.warnings():
        hint(w)
    report = inprocess.run_inprocess(py, opts, progress)
    return report, opts.connectors == ("all",) or len(opts.connectors) > 1


repro = command("repro", OPTIONS, _repro)


def register(app: typer.Typer) -> None:
    app.command("repro", help=HELP)(repro)


def _only_with(message: str, given: tuple[str, ...]) -> None:
    """Options of the other engine given: one line naming them."""
    if given:
        raise BadInput(message)


def _exit_code(report: ReproReport) -> int:
    """The verdict's exit code; notes (and another failure inside vLLM) on stderr."""
    if report.not_affected is not None:
        return ExitCode.OK
    for n in report.notes:
        hint(n)
    if report.reproduced:
        return ExitCode.FOUND
    unexpected = report.unexpected
    if unexpected is not None:
        hint(
            f"vLLM failed with another {unexpected.kind or 'error'} than #53514's at "
            f"{unexpected.location}: {unexpected.statement or unexpected.message}"
        )
        return ExitCode.COULD_NOT_RUN
    if report.any_ran:
        return ExitCode.OK
    if not report.results:
        raise CouldNotRun(
            "the repro harness answered, but with no results: no connector ran",
            hint="rerun with --debug to see the target interpreter's output, or check its vLLM "
            "with `pd-doctor envs list`",
        )
    raise CouldNotRun(
        "no connector ran (the reasons are above)",
        hint="rerun with --debug to see the target interpreter's output",
    )
