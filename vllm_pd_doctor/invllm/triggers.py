"""The trigger variants: how real traffic can make a P-side request hit N-1 cached tokens.

Runs INSIDE the target vLLM interpreter (stdlib + vllm only). Each variant gets a fresh real
Scheduler (fresh prefix cache), warms it the way its traffic would, then sends the trigger and
records what vLLM did. Any exception from vLLM is caught here and described, never hidden.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from . import drive, observe

TRIGGERS: dict[str, str] = {
    "same-prompt": "the same prompt twice: the first request caches the truncated prompt, "
    "the second one hits it",
    "shared-prefix": "a different prompt with the same first N-1 tokens (the last token "
    "differs) after the warm-up",
    "chunked": "the shared-prefix traffic with a small batch budget (max_num_batched_tokens = "
    "one block), so prefills run in chunks",
    "preempt": "a cold prompt one block longer, preempted by the scheduler's own preemption "
    "path after its first chunk and rescheduled: the truncation must not run twice",
}
ASSERT_53514 = ("num_new_tokens", "> 0")


def prompt_tokens(n: int, vocab: int, salt: int = 0) -> list[int]:
    """A deterministic prompt whose ids stay inside the vocabulary."""
    span = max(vocab - 3, 8)
    return [3 + (i * 7 + salt * 13) % span for i in range(n)]


def matches_53514(statement: str | None, function: str | None) -> bool:
    text = statement or ""
    return all(p in text for p in ASSERT_53514) and function in (None, "schedule")


def describe_exception(exc: BaseException, rid: str, rec: observe.Recorder) -> dict[str, Any]:
    loc = observe.exception_location(exc)
    statement = (loc["code"] if loc else "") or ""
    function = loc["function"] if loc else None
    location = f"{loc['file']}:{loc['line']}" if loc else None
    is_assert = isinstance(exc, AssertionError)
    rec.emit(
        "assertion" if is_assert else "exception",
        request_id=rid,
        location=location,
        statement=statement,
        exception=type(exc).__name__,
    )
    return {
        "fired": True,
        "kind": "assertion" if is_assert else "exception",
        "exception": type(exc).__name__,
        "matches_53514": is_assert and matches_53514(statement, function),
        "location": location,
        "function": function,
        "statement": statement,
        "message": str(exc) or None,
        "traceback": observe.format_exception(exc),
    }


NOT_FIRED: dict[str, Any] = {
    "fired": False,
    "kind": None,
    "matches_53514": False,
    "location": None,
    "statement": None,
    "message": None,
    "traceback": None,
}


def run_variant(
    name: str,
    build: Callable[[int], tuple[Any, Any]],
    n: int,
    block: int,
    vocab: int,
    default_budget: int,
    rec: observe.Recorder,
    phase_prefix: str = "",
) -> dict[str, Any]:
    """One trigger variant on a fresh scheduler. `build(budget)` -> (scheduler, factory)."""
    small = block
    budget = small if name in ("chunked", "preempt") else default_budget
    scheduler, factory = build(budget)
    connector, hooks, lookups = _watch(scheduler, rec)

    prompt, trigger_prompt, warm_len, preempt_after = _prompts(name, n, block, vocab)

    def steps(m: int) -> int:
        return -(-m // budget) + 8

    warm_res = None
    if warm_len is not None:
        rec.phase = f"{phase_prefix}warmup"
        warm = factory.make(f"{phase_prefix}{name}-warmup", prompt, _params())
        warm_res = drive.run_request(scheduler, rec, warm, steps(n))
        warm_res["truncation"] = observe.summarize(rec, str(warm.request_id))
    rec.phase = f"{phase_prefix}trigger"
    rid = f"{phase_prefix}{name}-trigger"
    trig = factory.make(rid, trigger_prompt, _params())
    res, assertion = _run_trigger(scheduler, rec, trig, rid, len(trigger_prompt), steps, preempt_after)
    truncation = observe.summarize(rec, rid)
    truncations = len(rec.of_kind("truncate", rid))
    why = None
    if name == "preempt" and not assertion["fired"]:
        why = preempt_note(truncations, truncation["hit_tokens"], len(trig.prompt_token_ids))
    return {
        "name": name,
        "description": TRIGGERS[name],
        "prompt_len": len(trigger_prompt),
        "warmup_len": warm_len,
        "max_num_batched_tokens": budget,
        "assertion": assertion,
        "truncation": truncation,
        "truncations": truncations,
        "preempted_by": res.get("preempted_by"),
        "why_not_fired": why,
        "prompt": {"len_before": res["len_before"], "len_after": res["len_after"]},
        "hit_tokens": truncation["hit_tokens"],
        "scheduled_tokens": res["scheduled_tokens"],
        "scheduled_steps": res["scheduled_steps"],
        "warmup": warm_res,
        "wrapped": {"connector_hooks": hooks, "lookups": lookups},
        "connector_class": drive.qualname(type(connector)),
        "connector_scheduler_class": drive.qualname(
            type(getattr(connector, "connector_scheduler", None) or connector)
        ),
    }


def _params() -> dict[str, Any]:
    """A P-side request's kv_transfer_params: each request gets its own dict (vLLM marks them,
    e.g. _p_side_truncated)."""
    return {"do_remote_decode": True}


def _run_trigger(
    scheduler: Any,
    rec: observe.Recorder,
    trig: Any,
    rid: str,
    len_before: int,
    steps: Callable[[int], int],
    preempt_after: int | None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Schedule the trigger request (`len_before` tokens long): (what the scheduler did, the
    assertion vLLM raised or not)."""
    try:
        res = drive.run_request(scheduler, rec, trig, steps(len_before), preempt_after=preempt_after)
    except drive.InternalsError:
        raise
    except Exception as exc:
        return {
            "len_before": len_before,
            "len_after": len(trig.prompt_token_ids),
            "scheduled_tokens": 0,
            "scheduled_steps": [],
            "preempted_by": None,
        }, describe_exception(exc, rid, rec)
    return res, dict(NOT_FIRED)


def _watch(scheduler: Any, rec: observe.Recorder) -> tuple[Any, Any, Any]:
    """Wrap the scheduler's connector hooks and the KV cache manager's lookups with watchers:
    (connector, hooks wrapped, lookups wrapped)."""
    connector = getattr(scheduler, "connector", None)
    if connector is None:
        raise drive.InternalsError("build Scheduler", "the scheduler created no KV connector")
    hooks = observe.wrap_connector(rec, connector)
    lookups = observe.wrap_lookups(rec, scheduler.kv_cache_manager)
    if not lookups:
        raise drive.InternalsError(
            "watch the prefix-cache lookup",
            "the KV cache manager has none of " + ", ".join(observe.LOOKUP_METHODS),
        )
    return connector, hooks, lookups


def _prompts(
    name: str, n: int, block: int, vocab: int
) -> tuple[list[int], list[int], int | None, int | None]:
    """A variant's prompts: (warm-up prompt, trigger prompt, warm-up length or None, preempt after
    this many steps or None)."""
    prompt = prompt_tokens(n, vocab)
    if name == "same-prompt":
        return prompt, list(prompt), n, None
    if name in ("shared-prefix", "chunked"):
        last = prompt[-1]
        return prompt, [*prompt[:-1], 3 + (last - 3 + 1) % max(vocab - 3, 8)], n, None
    if name == "preempt":
        return prompt, prompt_tokens(n + block, vocab, salt=1), None, 1
    raise drive.InternalsError("choose the trigger", f"unknown trigger {name!r}")


def granularity_note(n: int, hash_block: int) -> str | None:
    """Why a prompt length cannot make the lookup hit exactly N-1 tokens, and which N would."""
    if (n - 1) % hash_block == 0 and n > 1:
        return None
    lower = ((n - 1) // hash_block) * hash_block + 1
    upper = lower + hash_block
    would = f"N = {lower} or {upper}" if lower > 1 else f"N = {upper}"
    return (
        f"N-1 = {n - 1} is not a multiple of the prefix-cache hash granularity "
        f"{hash_block}, so no lookup can hit exactly N-1 tokens; {would} would"
    )


def preempt_note(truncations: int, hit: int | None, prompt_len: int) -> str | None:
    """Why the preempt trigger cannot fire where the truncation ran once, from what vLLM did."""
    if truncations != 1 or hit is None:
        return None
    return (
        f"preempt: not fired, as vLLM's code has it: the P-side truncation ran once, on the cold "
        f"first schedule (nothing cached yet); after the preemption the resumed request's lookup hit "
        f"{hit} of its {prompt_len} (already truncated) tokens, and vLLM stops a lookup one token short "
        f"of the prompt, so {prompt_len - hit} were left to compute. This trigger fires only where a "
        "resumed request is truncated again after its lookup (the truncation running twice)"
    )
