"""Driving vLLM's real scheduler from outside: feature-detected constructors, requests, steps.

Runs INSIDE the target vLLM interpreter (stdlib + vllm only). vLLM internals drift between
releases, so every constructor is driven by feature detection (signatures and dataclass
fields), never by the version string. Only the model step is fabricated (one sampled token per
finished prefill); everything else, including an assertion if one fires, is vLLM's own code.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import time
from typing import Any

from . import observe


class InternalsError(Exception):
    """vLLM's internals could not be driven: which stage, what was found."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(f"{stage}: {message}")
        self.stage = stage
        self.message = message


def _accepts(fn: Any) -> set[str] | None:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return set(params)


def construct(stage: str, cls: Any, **candidates: Any) -> Any:
    """Call `cls` with those candidate keyword arguments that it accepts."""
    accepted = _accepts(cls)
    kwargs = candidates if accepted is None else {k: v for k, v in candidates.items() if k in accepted}
    try:
        return cls(**kwargs)
    except Exception as exc:
        raise InternalsError(
            stage, f"{qualname(cls)}({', '.join(kwargs)}) failed: {type(exc).__name__}: {exc}"
        ) from exc


def qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def import_first(stage: str, candidates: list[tuple[str, str]]) -> Any:
    errors = []
    for module, attr in candidates:
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            errors.append(f"{module}.{attr} ({type(exc).__name__})")
    raise InternalsError(stage, "none of " + ", ".join(errors) + " could be imported")


def field_names(cls: Any) -> set[str]:
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    return set(_accepts(cls) or ())


class RequestFactory:
    """vLLM Requests hashed the way the engine core would (at `hash_block_size`)."""

    def __init__(self, vllm_config: Any, hash_block_size: int) -> None:
        from vllm import SamplingParams

        self.SamplingParams = SamplingParams
        self.Request = import_first("import Request", [("vllm.v1.request", "Request")])
        kcu = importlib.import_module("vllm.v1.core.kv_cache_utils")
        hashing = None
        for mod in ("vllm.utils.hashing", "vllm.utils"):
            try:
                hashing = importlib.import_module(mod)
            except ImportError:
                continue
            if hasattr(hashing, "get_hash_fn_by_name"):
                break
        if hashing is None or not hasattr(hashing, "get_hash_fn_by_name"):
            raise InternalsError("choose the prefix-cache hash", "get_hash_fn_by_name not found")
        algo = getattr(vllm_config.cache_config, "prefix_caching_hash_algo", "sha256")
        hash_fn = hashing.get_hash_fn_by_name(algo)
        kcu.init_none_hash(hash_fn)
        self.block_hasher = kcu.get_request_block_hasher(hash_block_size, hash_fn)

    def make(self, request_id: str, prompt: list[int], kv_transfer_params: dict[str, Any]) -> Any:
        sp = construct(
            "build SamplingParams",
            self.SamplingParams,
            max_tokens=1,
            extra_args={"kv_transfer_params": kv_transfer_params},
        )
        if hasattr(sp, "update_from_generation_config"):
            sp.update_from_generation_config({}, 2)
        req = construct(
            "build Request",
            self.Request,
            request_id=request_id,
            prompt_token_ids=list(prompt),
            sampling_params=sp,
            pooling_params=None,
            block_hasher=self.block_hasher,
            mm_features=None,
            eos_token_id=2,
            arrival_time=time.time(),
        )
        # Requests read kv_transfer_params from sampling_params.extra_args; older releases
        # set it from outside: make sure it is there, as the engine would.
        if getattr(req, "kv_transfer_params", None) is None:
            req.kv_transfer_params = kv_transfer_params
        return req


def fabricate_model_output(scheduler: Any, sched_out: Any, token: int) -> Any:
    """A ModelRunnerOutput with one sampled token for every request whose prefill is done."""
    outputs = importlib.import_module("vllm.v1.outputs")
    MRO = outputs.ModelRunnerOutput
    num_sched: dict[str, int] = dict(getattr(sched_out, "num_scheduled_tokens", {}) or {})
    req_ids = list(num_sched)
    sampled = []
    for rid in req_ids:
        req = scheduler.requests.get(rid)
        done = req is not None and req.num_computed_tokens >= req.num_tokens
        sampled.append([token] if done else [])
    candidates: dict[str, Any] = {
        "req_ids": req_ids,
        "req_id_to_index": {r: i for i, r in enumerate(req_ids)},
        "sampled_token_ids": sampled,
        "logprobs": None,
        "prompt_logprobs_dict": {},
        "pooler_output": None,
        "spec_token_ids": None,
        "kv_connector_output": None,
    }
    if dataclasses.is_dataclass(MRO):
        required = [
            f.name
            for f in dataclasses.fields(MRO)
            if f.default is dataclasses.MISSING
            and f.default_factory is dataclasses.MISSING  # type: ignore[misc]
            and f.init
        ]
        missing = [n for n in required if n not in candidates]
        if missing:
            raise InternalsError(
                "fabricate the model step", f"ModelRunnerOutput needs unknown fields {missing}"
            )
    return construct("fabricate the model step", MRO, **candidates)


def preempt(scheduler: Any, request: Any) -> str:
    """Preempt a running request through the scheduler's own preemption path."""
    fn = getattr(scheduler, "_preempt_request", None)
    if not callable(fn):
        raise InternalsError("preempt the trigger", "the Scheduler has no _preempt_request")
    # Its contract: the caller pops the request from the running queue first.
    running = getattr(scheduler, "running", None)
    if isinstance(running, list) and request in running:
        running.remove(request)
    accepted = _accepts(fn) or set()
    if "timestamp" in accepted:
        fn(request, time.monotonic())
    else:
        fn(request)
    return "Scheduler._preempt_request"


def run_request(
    scheduler: Any, rec: observe.Recorder, request: Any, max_steps: int, preempt_after: int | None = None
) -> dict[str, Any]:
    """Add a request and step the real scheduler until it finishes (exceptions propagate)."""
    rid = str(request.request_id)
    len_before = len(request.prompt_token_ids)
    observe.watch_prompt(rec, request)
    rec.emit("add_request", request_id=rid, num_tokens=len_before)
    scheduler.add_request(request)
    scheduled_total = 0
    scheduled_steps = []
    preempted_by = None
    for step in range(max_steps):
        rec.emit("schedule", request_id=rid, num_tokens=request.num_tokens)
        sched_out = scheduler.schedule()
        n = int((getattr(sched_out, "num_scheduled_tokens", {}) or {}).get(rid, 0))
        rec.emit(
            "scheduled", request_id=rid, scheduled_tokens=n, num_computed_tokens=request.num_computed_tokens
        )
        scheduled_total += n
        if n:
            scheduled_steps.append(n)
        mro = fabricate_model_output(scheduler, sched_out, token=7)
        scheduler.update_from_output(sched_out, mro)
        finished = rid not in scheduler.requests or request.is_finished()
        if finished:
            rec.emit("finished", request_id=rid, status=str(getattr(request, "status", "")))
            break
        if preempt_after is not None and step + 1 == preempt_after and preempted_by is None:
            preempted_by = preempt(scheduler, request)
            rec.emit(
                "preempted",
                request_id=rid,
                num_tokens=request.num_tokens,
                num_computed_tokens=request.num_computed_tokens,
                via=preempted_by,
            )
    else:
        raise InternalsError("step the scheduler", f"request {rid} did not finish in {max_steps} steps")
    return {
        "len_before": len_before,
        "len_after": len(request.prompt_token_ids),
        "scheduled_tokens": scheduled_total,
        "scheduled_steps": scheduled_steps,
        "preempted_by": preempted_by,
    }
