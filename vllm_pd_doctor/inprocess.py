"""`pd-doctor repro` on the in-process engine: run the harness in the target vLLM, read its answer.

The harness (vllm_pd_doctor/target/harness.py) builds vLLM's real Scheduler with the real
connector scheduler half and KV cache manager, and observes what they do. This module only
prepares the run, starts it in the target interpreter and turns its JSON into typed results.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from vllm_pd_doctor import hotfix, targetrun
from vllm_pd_doctor.errors import BadInput, CouldNotRun
from vllm_pd_doctor.model import (
    Assertion,
    ConnectorVerdict,
    Control,
    Event,
    ReproReport,
    RunError,
    ScenarioConfig,
    Truncation,
    VllmInstall,
)
from vllm_pd_doctor.progress import Progress, phase, quiet
from vllm_pd_doctor.target import connectors

KV_ROLES = ("kv_producer", "kv_consumer", "kv_both")
MAMBA_CACHE_MODES = ("align", "all", "none")
DEFAULT_MAX_MODEL_LEN = 4096


def repro_dir() -> Path:
    """The scenario assets: installed beside the package, or at the repository's top level."""
    here = Path(__file__).resolve().parent
    for cand in (here / "_repro", here.parent / "repro"):
        if cand.is_dir():
            return cand
    raise CouldNotRun("pd-doctor's repro assets are missing (repro/ or vllm_pd_doctor/_repro/)",
                      hint="reinstall pd-doctor")


def default_model_dir() -> Path:
    return repro_dir() / "models" / "tiny-hybrid"


@dataclass(frozen=True)
class ReproOptions:
    """What the user asked `pd-doctor repro` for (validated)."""

    connectors: tuple[str, ...]
    """Connector keys, or ("all",)."""
    block_size: int = 16
    prompt_len: int | None = None
    """N; default 2 x block size + 1 so that N-1 is block aligned."""
    mamba_cache_mode: str | None = None
    kv_role: str = "kv_producer"
    model: Path | None = None
    timeout: float = 600.0
    hotfix: bool = False
    """Apply pd-doctor's #53514 backport (target/hotfix.py) before building the scheduler."""

    @property
    def effective_prompt_len(self) -> int:
        return self.prompt_len if self.prompt_len is not None else 2 * self.block_size + 1

    def warnings(self) -> list[str]:
        n = self.effective_prompt_len
        if (n - 1) % self.block_size:
            return [f"--prompt-len {n}: N-1 = {n - 1} is not a multiple of the block size "
                    f"{self.block_size}, so no prefix-cache hit can cover exactly N-1 tokens; "
                    f"the assertion cannot fire in this scenario (use N = k x "
                    f"{self.block_size} + 1 to test for the bug)"]
        return []


def parse_connectors(value: str) -> tuple[str, ...]:
    known = connectors.connector_keys()
    keys = tuple(k.strip().lower() for k in value.split(",") if k.strip())
    if not keys:
        raise BadInput("--connector: empty", hint=f"use one of {', '.join(known)}, all")
    if "all" in keys:
        return ("all",)
    for k in keys:
        if k not in known:
            raise BadInput(f"--connector {k}: unknown connector",
                           hint=f"use one of {', '.join(known)}, or all")
    return tuple(dict.fromkeys(keys))


def make_options(*, connector: str, block_size: int, prompt_len: int | None,
                 mamba_cache_mode: str | None, kv_role: str, model: Path | None,
                 timeout: float, hotfix: bool = False) -> ReproOptions:
    connectors = parse_connectors(connector)
    if block_size < 1:
        raise BadInput(f"--block-size {block_size}: must be a positive number of tokens",
                       hint="use e.g. --block-size 16")
    if prompt_len is not None and prompt_len < 2:
        raise BadInput(f"--prompt-len {prompt_len}: must be at least 2 (the prefill side keeps "
                       "N-1 tokens, and at least one of them must be cached)",
                       hint=f"omit it for the default {2 * block_size + 1}, or use k x "
                            f"{block_size} + 1")
    n = prompt_len if prompt_len is not None else 2 * block_size + 1
    if n + 2 > DEFAULT_MAX_MODEL_LEN:
        raise BadInput(f"--prompt-len {n}: longer than the harness's max model length "
                       f"{DEFAULT_MAX_MODEL_LEN - 2}", hint="use a shorter prompt")
    if kv_role not in KV_ROLES:
        raise BadInput(f"--kv-role {kv_role}: unknown role", hint=f"use one of {', '.join(KV_ROLES)}")
    if mamba_cache_mode is not None and mamba_cache_mode not in MAMBA_CACHE_MODES:
        raise BadInput(f"--mamba-cache-mode {mamba_cache_mode}: unknown mode",
                       hint=f"use one of {', '.join(MAMBA_CACHE_MODES)}")
    if model is not None:
        model = model.expanduser()
        cfg = model / "config.json" if model.is_dir() else model
        if not cfg.is_file():
            raise BadInput(f"--model {model}: no config.json there",
                           hint="give a directory holding a Hugging Face style config.json")
        model = cfg.parent
        _check_hybrid_config(cfg)
    if timeout <= 0:
        raise BadInput(f"--timeout {timeout}: must be positive")
    return ReproOptions(connectors=connectors, block_size=block_size, prompt_len=prompt_len,
                        mamba_cache_mode=mamba_cache_mode, kv_role=kv_role, model=model,
                        timeout=timeout, hotfix=hotfix)


def _check_hybrid_config(cfg: Path) -> None:
    from vllm_pd_doctor import limits

    text = limits.read_config_text(cfg, f"--model {cfg}")  # bounded, UTF-8 or BadInput
    try:
        data = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise BadInput(f"--model {cfg}: not valid JSON ({exc})") from None
    layers = data.get("layer_types") or data.get("layers_block_type") if isinstance(data, dict) \
        else None
    if not isinstance(layers, list) or "attention" not in layers or \
            all(t == "attention" for t in layers):
        raise BadInput(f"--model {cfg}: the in-process engine needs a hybrid config whose "
                       "layer_types list holds both 'attention' and mamba layers",
                       hint="omit --model to use the bundled tiny hybrid config")


def run_inprocess(python: str, opts: ReproOptions, progress: Progress = quiet) -> ReproReport:
    """Run the harness in `python` and return its typed verdicts."""
    interp = targetrun.probe_interpreter(python)
    targetrun.require_vllm(interp)
    model = opts.model or default_model_dir()
    spec = {
        "connectors": list(opts.connectors),
        "block_size": opts.block_size,
        "prompt_len": opts.effective_prompt_len,
        "mamba_cache_mode": opts.mamba_cache_mode,
        "kv_role": opts.kv_role,
        "model_dir": str(model),
        "max_model_len": DEFAULT_MAX_MODEL_LEN,
        "hotfix": opts.hotfix,
    }
    with phase(progress, f"running the in-process harness in {python} (vLLM "
                         f"{interp.vllm_version or '?'}); importing vLLM takes a few seconds"):
        run = targetrun.run_module(python, "harness", ["--spec", json.dumps(spec)],
                                   timeout=opts.timeout, what="the in-process harness")
    report = parse_answer(run.answer, python, opts)
    progress(f"harness finished in {run.wall_s:.1f} s")
    return report


def parse_answer(answer: dict[str, Any], python: str, opts: ReproOptions) -> ReproReport:
    err = answer.get("error")
    vinfo = answer.get("vllm") or {}
    if err:
        _raise_for(err, opts, answer)
    results = tuple(_verdict(r) for r in answer.get("results", []))
    patches = hotfix.patches_by_connector(answer)  # pd-doctor hotfix (issue 13)
    if patches is not None:
        results = tuple(dataclasses.replace(r, hotfix=patches.get(r.connector, ()))
                        for r in results)
    report = ReproReport(
        engine="inprocess",
        vllm=VllmInstall(version=str(vinfo.get("version", "?")), path=str(vinfo.get("path", "?")),
                         python=python),
        results=results,
        available_connectors=tuple(answer.get("available_connectors", ())),
        timings={k: float(v) for k, v in (answer.get("timings") or {}).items()},
        notes=tuple(_notes(results)),
    )
    if opts.connectors != ("all",):
        failed = [r for r in results if r.error is not None]
        if failed and len(failed) == len(results):
            e = failed[0].error
            assert e is not None
            _raise_for({"kind": e.kind, "stage": e.stage, "message": e.message,
                        "traceback": e.traceback}, opts, answer)
    return report


def _raise_for(err: dict[str, Any], opts: ReproOptions, answer: dict[str, Any]) -> None:
    kind = err.get("kind")
    msg = str(err.get("message", "unknown error"))
    stage = str(err.get("stage", "?"))
    accepted = answer.get("mamba_cache_modes_accepted")
    if opts.mamba_cache_mode and accepted is not None and opts.mamba_cache_mode not in accepted:
        version = (answer.get("vllm") or {}).get("version", "?")
        raise BadInput(f"--mamba-cache-mode {opts.mamba_cache_mode}: vLLM {version} does not "
                       "accept it with prefix caching",
                       hint=f"use one of: {', '.join(accepted) or 'none'}")
    if kind == "no_vllm":
        raise CouldNotRun(f"vLLM cannot be imported in this interpreter: {msg}",
                          hint="point --python at your vLLM environment's interpreter")
    if kind == "connector_missing":
        raise CouldNotRun(msg, hint="use --connector all to run every connector this vLLM has")
    raise CouldNotRun(f"cannot drive this vLLM's internals while trying to {stage}: {msg}",
                      hint="this vLLM may be too old or too new for the in-process engine; "
                           "rerun with --debug and report it",
                      detail=err.get("traceback"))


def _notes(results: tuple[ConnectorVerdict, ...]) -> list[str]:
    notes = []
    for r in results:
        if r.transfer_library and r.transfer_library_installed is False:
            notes.append(f"{r.label}: the transfer library ({r.transfer_library}) is not "
                         "installed; it is not needed for the scheduler half this run drives")
    return notes


def _verdict(r: dict[str, Any]) -> ConnectorVerdict:
    key = str(r.get("connector", "?"))
    base = ConnectorVerdict(connector=key, label=str(r.get("connector_label", key)),
                            kv_connector=str(r.get("kv_connector", "?")))
    if "error" in r:
        e = r["error"]
        return dataclasses.replace(base, error=RunError(
            kind=str(e.get("kind")), stage=str(e.get("stage")), message=str(e.get("message")),
            traceback=e.get("traceback")))
    a = r["assertion"]
    t = r["truncation"]
    c = r["control"]
    cfg = r["config"]
    lib = r.get("transfer_library") or {}
    return dataclasses.replace(
        base,
        connector_class=r.get("connector_class"),
        connector_scheduler_class=r.get("connector_scheduler_class"),
        transfer_library=lib.get("module"),
        transfer_library_installed=lib.get("installed"),
        config=ScenarioConfig(block_size=int(cfg["block_size"]), prompt_len=int(cfg["prompt_len"]),
                              mamba_cache_mode=str(cfg["mamba_cache_mode"]),
                              kv_role=str(cfg["kv_role"]), model=str(cfg["model_dir"])),
        assertion=Assertion(fired=bool(a["fired"]), location=a.get("location"),
                            statement=a.get("statement"),
                            matches_53514=bool(a.get("matches_53514", False)),
                            traceback=a.get("traceback")),
        truncation=Truncation.from_observed(t),
        hit_tokens=r["prefix_cache"].get("hit_tokens"),
        prompt_len_before=r["prompt"].get("len_before"),
        prompt_len_after=r["prompt"].get("len_after"),
        scheduled_tokens=r.get("scheduled_tokens"),
        control=Control(prompt_len=int(c["prompt_len"]), assertion_fired=bool(c["assertion_fired"]),
                        hit_tokens=c.get("hit_tokens"),
                        scheduled_tokens=int(c.get("scheduled_tokens") or 0),
                        truncation_hook=str(c.get("truncation_hook") or "none")),
        events=tuple(Event.from_dict(e) for e in r.get("events", [])),
        elapsed_s=r.get("elapsed_s"),
    )
