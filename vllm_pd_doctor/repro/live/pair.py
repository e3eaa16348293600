"""A local prefill/decode pair for the length of a `with` block: started, healthy, always stopped.

`local_pair` is the one way the live engine runs a pair of its own (#53514's probe and the live
scenarios): the target interpreter checked, the model made or found, free ports picked, both
engines started with pd-doctor's plugin and waited for (once more on other ports when a port was
taken meanwhile), and on the way out every process stopped by its process group (`engines.stop_all`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from vllm_pd_doctor.infra import targetrun
from vllm_pd_doctor.infra.progress import Progress, phase
from vllm_pd_doctor.repro.live import engines
from vllm_pd_doctor.repro.live.client import Client
from vllm_pd_doctor.repro.live.engines import Engine
from vllm_pd_doctor.repro.live.options import LiveOptions


@dataclass(frozen=True)
class Launch:
    """How each engine of the pair is started (the same for both, and for a second attempt)."""

    python: str
    vllm_version: str | None
    model: Path
    tiny: bool
    device: str
    run_dir: Path
    pypath: str


@dataclass
class LocalPair:
    """A running pair: its engines (prefill, decode), the client, where it writes, what it serves."""

    interp: targetrun.Interpreter
    engines: list[Engine]
    client: Client
    run_dir: Path
    model: Path
    timings: dict[str, float] = field(default_factory=dict)

    @property
    def prefill(self) -> Engine:
        return self.engines[0]

    @property
    def decode(self) -> Engine:
        return self.engines[1]


@contextlib.contextmanager
def local_pair(python: str, lo: LiveOptions, progress: Progress) -> Iterator[LocalPair]:
    """Start a healthy pair, yield it, stop it (also on an error or a signal)."""
    engines.check_ports(lo)
    interp = targetrun.probe_interpreter(python)
    targetrun.require_vllm(interp)
    device = engines.device_for(interp, lo)
    t = time.perf_counter()
    model, tiny = engines.model_dir(python, lo, progress)
    run_dir = engines.new_run_dir(lo)
    lp = LocalPair(interp, engines.plan(lo, run_dir), Client(), run_dir, model)
    lp.timings["model_s"] = round(time.perf_counter() - t, 3)
    progress(f"run directory {run_dir}; logs: {lp.prefill.log}, {lp.decode.log}")
    try:
        with engines.plugin_path() as pypath:
            t = time.perf_counter()
            launch = Launch(python, interp.vllm_version, model, tiny, device, run_dir, pypath)
            start_pair(launch, lo, lp.engines, lp.client, progress)  # may start a new pair
            lp.timings["engines_healthy_s"] = round(time.perf_counter() - t, 3)
            yield lp
    finally:
        lp.timings["shutdown_s"] = round(engines.stop_all(lp.engines), 3)
        lp.client.close()
        progress(f"engines stopped ({lp.timings['shutdown_s']:.1f} s)")
    for eng in lp.engines:
        if eng.healthy_s is not None:
            lp.timings[f"{eng.role}_healthy_s"] = round(eng.healthy_s, 3)


def start_pair(
    launch: Launch, lo: LiveOptions, pair: list[Engine], client: Client, progress: Progress
) -> None:
    """Start both engines and wait until they are healthy; once more on other free ports when a
    picked port was taken before the engine bound it (the new pair replaces `pair`'s contents, so
    the caller stops whichever pair runs)."""
    for attempt in (1, 2):
        for eng in pair:
            engines.start_engine(
                engines.engine_command(launch.python, eng, launch.model, launch.tiny, launch.device, lo),
                engines.engine_env(
                    launch.python, eng, launch.pypath, launch.device, launch.run_dir, hotfix=lo.hotfix
                ),
                eng,
                launch.run_dir,
            )
            progress(
                f"starting the {eng.role} engine (vLLM {launch.vllm_version}, {launch.device}, "
                f"{lo.entry.label}, HTTP {eng.port}, side channel {eng.side_port}, pid "
                f"{eng.proc.pid if eng.proc else '?'})"
            )
        engines.write_pids(launch.run_dir, pair)
        try:
            with phase(progress, "booting the prefill and decode engines"):
                engines.wait_healthy(client, pair, min(lo.startup_timeout, lo.timeout), progress)
            return
        except engines.PortTaken as exc:
            if attempt == 2 or lo.prefill_port or lo.decode_port:
                raise
            progress(f"{exc.message}; starting the pair again on other free ports")
            engines.stop_all(pair)
            pair[:] = engines.plan(lo, launch.run_dir)
