"""Gather what the bug-report bundle is built from: the inputs, and the collectors run on them
(environment, check-config, the repro, triage of the logs). `bundle.build` turns it into files."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from vllm_pd_doctor.report import collect
from vllm_pd_doctor.report.collect import Collected
from vllm_pd_doctor.results.checkconfig import CheckReport
from vllm_pd_doctor.results.launch import Server

TRIAGE_PENDING = "not run (pd-doctor triage reads the logs: issue 16)"

NO_STATUS = "no running engines given (use --prefill-url/--decode-url)"
STATUS_INTERVAL = 2.0
"""Seconds between the snapshot's two /metrics readings (status's default --interval)."""

LOG_CAP = 500_000
"""Characters of each log kept in raw/logs/ (head and tail, the cut marked): the copy is
redacted whole (about 1 s per MB), after the cut, so this bounds its cost."""


@dataclass(frozen=True)
class ReportInputs:
    python: str
    prefill_cmd: str | None = None
    decode_cmd: str | None = None
    config: Path | None = None
    model: Path | None = None
    logs: tuple[Path, ...] = ()
    repro: bool = True
    redact_hosts: bool = True
    timeout: float = 300.0
    log_cap: int = LOG_CAP
    environ: Mapping[str, str] = field(default_factory=dict)
    home: str | None = None
    redact_extra: tuple[str, ...] = ()
    """--redact-extra: site-specific regular expressions to redact everywhere."""
    private: bool = False
    """--private: add verbatim copies of the inputs (raw/); never the default for posting."""
    prefill_urls: tuple[str, ...] = ()
    decode_urls: tuple[str, ...] = ()
    """--prefill-url/--decode-url: running engines; the bundle gets a `pd-doctor status` snapshot."""


@dataclass(frozen=True)
class Gathered:
    """What the collectors returned, unredacted (never written as is)."""

    interpreter: Collected
    collect_env: Collected
    nixl: Collected
    ucx: Collected
    check_config: Collected
    """value: check-config's `CheckReport` (its `servers` are the parsed launch commands)."""
    repro: Collected
    """value: a `collect.ReproRun`."""
    logs: tuple[tuple[Path, Collected], ...]
    config_text: Collected | None
    """value: (text, size) of the --config file, attached as raw/config."""
    triage: Collected = field(default_factory=lambda: Collected.fail(TRIAGE_PENDING))
    """value: `pd-doctor triage`'s typed result over the logs (issue 16 fills it in `gather`)."""
    status: Collected = field(default_factory=lambda: Collected.fail(NO_STATUS))
    """value: `status.public.snapshot` of the running engines (public form by construction)."""

    @property
    def check(self) -> CheckReport | None:
        return self.check_config.value if self.check_config.ok else None

    @property
    def servers(self) -> tuple[Server, ...]:
        return self.check.servers if self.check is not None else ()


def given(inputs: ReportInputs) -> tuple[tuple[str, str], ...]:
    return tuple(
        (role, text)
        for role, text in (("prefill", inputs.prefill_cmd), ("decode", inputs.decode_cmd))
        if text
    )


def gather(inputs: ReportInputs, progress: Callable[[str], None]) -> Gathered:
    """Run every collector, concurrently, each with its own timeout."""
    try:
        return _gather(inputs, progress)
    except BaseException:
        collect.stop_all_children()
        raise


def _gather(inputs: ReportInputs, progress: Callable[[str], None]) -> Gathered:
    t = inputs.timeout
    pool = ThreadPoolExecutor(max_workers=6)
    try:
        interp_f = pool.submit(collect.probe, inputs.python, min(t, 60.0))
        nixl_f = pool.submit(collect.nixl_info, inputs.python, min(t, 60.0))
        ucx_f = pool.submit(collect.ucx_version, inputs.python, min(t, 20.0), inputs.environ.get("PATH", ""))
        check_f = None
        if inputs.config is not None or given(inputs):
            progress("checking the launch commands (check-config)")
            check_f = pool.submit(
                collect.check_config,
                python=inputs.python,
                prefill_cmd=inputs.prefill_cmd,
                decode_cmd=inputs.decode_cmd,
                config=inputs.config,
                model=inputs.model,
                progress=progress,
            )
        status_f = pool.submit(_status, inputs) if inputs.prefill_urls or inputs.decode_urls else None
        interp = interp_f.result()
        has_vllm = bool(interp.ok and interp.value.get("vllm_path"))
        progress("running vLLM's environment collector (python -m vllm.collect_env)")
        env_f = pool.submit(collect.vllm_collect_env, inputs.python, has_vllm, t)
        repro_c: Collected
        if not inputs.repro:
            repro_c = Collected.fail("skipped (--no-repro)")
        elif not interp.ok:
            repro_c = Collected.fail(interp.why or "the interpreter did not answer")
        elif not has_vllm:
            repro_c = Collected.fail(f"no vLLM in {inputs.python}: the repro needs it")
        else:
            repro_c = collect.repro(inputs.python, inputs.model, t, progress)
        logs_c = tuple((p, collect.read_log(p)) for p in inputs.logs)
        cfg = None
        if inputs.config is not None:
            cfg = collect.read_log(inputs.config, f"--config {inputs.config}")
        check_c = (
            check_f.result()
            if check_f is not None
            else Collected.fail("no launch commands given (use --prefill-cmd/--decode-cmd or --config)")
        )
        return Gathered(
            interpreter=interp,
            collect_env=env_f.result(),
            nixl=nixl_f.result(),
            ucx=ucx_f.result(),
            check_config=check_c,
            repro=repro_c,
            logs=logs_c,
            config_text=cfg,
            triage=_triage(inputs, logs_c, has_vllm),
            status=status_f.result() if status_f is not None else Collected.fail(NO_STATUS),
        )
    finally:
        # on Ctrl-C do not wait here for the children: gather() stops them by PID
        pool.shutdown(wait=False, cancel_futures=True)


def _triage(inputs: ReportInputs, logs_c: tuple[tuple[Path, Collected], ...], has_vllm: bool) -> Collected:
    """`pd-doctor triage` over the logs read (one timeline), with the release (--python's vLLM
    source) and the model when they can be read; never raises."""
    from vllm_pd_doctor import triage

    texts = [(p.name, c.value[0]) for p, c in logs_c if c.ok]
    if not texts:
        return Collected.fail("no logs given (use --log FILE)" if not logs_c else "no log could be read")

    def go() -> Collected:
        release = model = None
        if has_vllm:
            try:
                release = triage.release_from_python(inputs.python)
            except Exception:  # the logs alone still decide what they can
                release = None
        if inputs.model is not None:
            try:
                from vllm_pd_doctor.deployment.model import resolve_model

                model = resolve_model(inputs.model)[0]
            except Exception:
                model = None
        return Collected(True, triage.triage_texts(texts, triage.Context(release=release, model=model)))

    return collect.guarded(go)


def _status(inputs: ReportInputs) -> Collected:
    """`pd-doctor status` over the running engines, as its public snapshot; never raises."""

    def go() -> Collected:
        from vllm_pd_doctor.status import core, public

        eps = [core.Endpoint("prefill", u) for u in inputs.prefill_urls]
        eps += [core.Endpoint("decode", u) for u in inputs.decode_urls]
        r = core.run_status(eps, STATUS_INTERVAL, timeout=min(inputs.timeout, 10.0))
        return Collected(True, public.snapshot(r))

    return collect.guarded(go)
