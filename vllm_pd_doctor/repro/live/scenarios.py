"""`repro --engine live --scenario`: the P/D failures a client can trigger, driven on a real pair.

Which scenarios a client can trigger is the registry's (`knowledge.scenarios`, `live`): today
d-extra-block (`extra_block`: the client is the proxy that appends P's first token) and
abort-race (`abort`: the client goes away while D's KV is in flight). They run on one pair, the
one that kills the decode engine last. The verdict is what happened to D (`fate`): it died (HTTP
status, /health, its process, the fatal traceback in its log with vLLM's file:line) or it
survived; the result is the scenario report of the in-process engine (`ScenarioReport`, engine
`live`). Without `--model` the pair serves a tiny dense model (d-extra-block's assertion is on the
NIXL worker's non-Mamba path). With `--prefill-url --decode-url` the same runs against existing
engines (D's fate then from HTTP and /health alone).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable

import httpx

from vllm_pd_doctor.infra.errors import BadInput, CouldNotRun, FieldError
from vllm_pd_doctor.infra.progress import Progress
from vllm_pd_doctor.knowledge.facts import scenarios as known
from vllm_pd_doctor.repro import models as defaults
from vllm_pd_doctor.repro.live import abort, engines, extra_block
from vllm_pd_doctor.repro.live.client import Client
from vllm_pd_doctor.repro.live.fate import Ctx, Side, d_alive_now
from vllm_pd_doctor.repro.live.options import CONFIRM_FLAG, LiveOptions, is_loopback, live_connectors
from vllm_pd_doctor.repro.live.pair import local_pair
from vllm_pd_doctor.repro.live.probe import effective_block_size
from vllm_pd_doctor.results.repro import VllmInstall
from vllm_pd_doctor.results.scenarios import COULD_NOT_RUN, ScenarioCell, ScenarioReport

RUNS: dict[str, Callable[[Ctx], ScenarioCell]] = {
    abort.ID: abort.run,
    extra_block.ID: extra_block.run,
}
"""In the order they run on one pair: the one that kills D last."""


def check(ids: tuple[str, ...]) -> tuple[str, ...]:
    """The asked scenarios in run order; BadInput (one line) for one a client cannot trigger."""
    for sid in ids:
        if sid == known.DEFAULT:
            raise BadInput(
                f"--scenario {sid} --engine live is the live probe of #53514, run on its own pair",
                hint=f"run it alone (pd-doctor repro --engine live), then --scenario {','.join(RUNS)}",
            )
        if sid not in RUNS:
            raise BadInput(
                f"--scenario {sid} --engine live: not client-triggerable on a real pair "
                f"(live: {', '.join(known.live_ids())})",
                hint=f"run it in-process: pd-doctor repro --scenario {sid}",
            )
    return tuple(s for s in RUNS if s in ids)


def run_scenarios(python: str, lo: LiveOptions, ids: tuple[str, ...], progress: Progress) -> ScenarioReport:
    """Every asked scenario on one local pair (or the user's endpoints)."""
    order = check(ids)
    if lo.remote:
        return _remote(python, lo, order, progress)
    if lo.model is None:
        lo = dataclasses.replace(lo, model=defaults.dense())
    t0 = time.perf_counter()
    with local_pair(python, lo, progress) as lp:
        p_eng, d_eng = lp.engines
        ctx = _ctx(lp.client, Side(p_eng.url, p_eng), Side(d_eng.url, d_eng), lo, progress)
        cells = _run_all(ctx, order)
    timings = {**lp.timings, "total_s": round(time.perf_counter() - t0, 3)}
    return ScenarioReport(
        vllm=VllmInstall(
            version=lp.interp.vllm_version or "?", path=lp.interp.vllm_path or "?", python=python
        ),
        scenarios=order,
        cells=cells,
        model=str(lp.model),
        available_connectors=tuple(c.key for c in live_connectors()),
        timings=timings,
        engine="live",
        notes=(
            *ctx.notes,
            f"prefill log: {p_eng.log}",
            f"decode log: {d_eng.log}",
            f"decode trace: {d_eng.trace}",
            f"run directory: {lp.run_dir}",
        ),
    )


def _ctx(client: Client, p: Side, d: Side, lo: LiveOptions, progress: Progress) -> Ctx:
    notes: list[str] = []
    model = client.model_id(p.url)
    w, source = effective_block_size(client, p.url, lo.block_size, notes)
    progress(f"live scenarios: effective block size W = {w} ({source}), model {model}")
    return Ctx(
        client,
        p,
        d,
        model,
        w,
        uuid.uuid4().hex[:8],
        progress,
        notes,
        hybrid=_hybrid(lo),
        connector=lo.connector,
    )


def _hybrid(lo: LiveOptions) -> bool | None:
    return engines.is_hybrid(lo.model) if lo.model is not None and not lo.remote else None


def _run_all(ctx: Ctx, order: tuple[str, ...]) -> tuple[ScenarioCell, ...]:
    cells: list[ScenarioCell] = []
    for sid in order:
        if cells and not d_alive_now(ctx):
            cells.append(
                ScenarioCell(
                    sid,
                    ctx.connector,
                    COULD_NOT_RUN,
                    reason=f"the decode engine died in {cells[-1].scenario}",
                )
            )
            continue
        cells.append(RUNS[sid](ctx))
    return tuple(cells)


def _remote(python: str, lo: LiveOptions, order: tuple[str, ...], progress: Progress) -> ScenarioReport:
    """The scenarios against existing engines: D is needed, and a non-local one confirmed."""
    assert lo.prefill_url is not None
    if lo.decode_url is None:
        raise FieldError(
            ("decode_url", "prefill_url"), "{0} is needed with {1} for --scenario: it is D they drive"
        )
    for url in (lo.prefill_url, lo.decode_url):
        if not is_loopback(url) and not lo.confirm_remote:
            raise FieldError(
                ("decode_url", "confirm_remote"),
                "{flag} {value}: these scenarios can kill the decode engine there",
                value=url,
                hint="add {1} to run them against a non-local engine",
                usual={"confirm_remote": CONFIRM_FLAG},
            )
    progress(
        f"remote scenarios against prefill {lo.prefill_url}, decode {lo.decode_url}: "
        "THIS MAY KILL THE DECODE ENGINE"
    )
    t0 = time.perf_counter()
    client = Client()
    try:
        p, d = Side(lo.prefill_url.rstrip("/")), Side(lo.decode_url.rstrip("/"))
        ctx = _ctx(client, p, d, lo, progress)
        cells = _run_all(ctx, order)
    except httpx.HTTPError as exc:
        raise CouldNotRun(f"the remote scenarios failed: {exc}") from None
    finally:
        client.close()
    return ScenarioReport(
        vllm=VllmInstall(version="remote", path=lo.prefill_url, python=python),
        scenarios=order,
        cells=cells,
        model=ctx.model,
        available_connectors=tuple(c.key for c in live_connectors()),
        timings={"total_s": round(time.perf_counter() - t0, 3)},
        engine="live-remote",
        notes=tuple(ctx.notes),
    )
