"""Watchers that observe vLLM's real objects while a request is scheduled.

Runs inside the target vLLM interpreter: stdlib only (vLLM objects are passed in).
Shared by the in-process harness and the live-engine plugin. Nothing here changes
what vLLM does: every wrapper calls the original method with the same arguments and
returns its result unchanged; it only records what it saw.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

from . import wire

# Hook names of the KV connector scheduler API that may truncate a P-side prompt.
CONNECTOR_HOOKS = (
    "on_new_request",
    "get_num_new_matched_tokens",
    "update_state_after_alloc",
    "request_finished",
)
# KV cache manager methods that do the local prefix-cache lookup.
LOOKUP_METHODS = ("get_computed_blocks", "get_computed_blocks_for_connector")

_THIS_DIR = os.path.dirname(os.path.abspath(__file__))


def vllm_relpath(filename: str) -> str:
    """`.../site-packages/vllm/v1/core/x.py` -> `vllm/v1/core/x.py` (else unchanged)."""
    norm = filename.replace("\\", "/")
    marker = "/vllm/"
    idx = norm.rfind(marker)
    if idx >= 0 and "/site-packages/" in norm[: idx + 1] + "/site-packages/":
        return norm[idx + 1 :]
    return norm


def vllm_frames(frames: list[traceback.FrameSummary]) -> list[wire.Frame]:
    """The frames that belong to vLLM (not to us, not to the stdlib)."""
    out: list[wire.Frame] = []
    for fr in frames:
        fname = fr.filename.replace("\\", "/")
        if fname.startswith(_THIS_DIR) or "/vllm/" not in fname:
            continue
        out.append(
            {
                "file": vllm_relpath(fname),
                "line": fr.lineno or 0,
                "function": fr.name,
                "code": (fr.line or "").strip(),
            }
        )
    return out


class Recorder:
    """An ordered, thread-safe event log with a monotonic clock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._t0 = time.perf_counter()
        self.events: list[dict[str, Any]] = []
        self.phase = "setup"
        self._hook_stack: list[str] = []
        self.sink: Callable[[dict[str, Any]], None] | None = None

    def emit(self, kind: str, **fields: Any) -> dict[str, Any]:
        with self._lock:
            ev = {
                "seq": len(self.events),
                "t_ms": round((time.perf_counter() - self._t0) * 1000.0, 3),
                "phase": self.phase,
                "kind": kind,
            }
            ev.update(fields)
            self.events.append(ev)
        if self.sink is not None:
            self.sink(ev)
        return ev

    @property
    def active_hook(self) -> str | None:
        return self._hook_stack[0] if self._hook_stack else None

    def of_kind(self, kind: str, request_id: str | None = None) -> list[dict[str, Any]]:
        return [
            e
            for e in self.events
            if e["kind"] == kind and (request_id is None or e.get("request_id") == request_id)
        ]


def _request_of(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    req = kwargs.get("request")
    if req is None:
        for a in args:
            if hasattr(a, "request_id") and hasattr(a, "num_tokens"):
                return a
    return req


def _num_tokens(req: Any) -> int | None:
    try:
        return int(req.num_tokens)
    except Exception:
        return None


def _num_prompt_tokens(req: Any) -> int | None:
    try:
        return int(req.num_prompt_tokens)
    except Exception:
        return None


def watch_prompt(rec: Recorder, request: Any) -> bool:
    """Replace the request's prompt list by one that records when it shrinks.

    The list keeps the same contents and type behaviour (a `list` subclass); each
    shrinking call records the vLLM stack at that moment. Returns False when the
    request has no prompt list to watch.
    """
    prompt = getattr(request, "prompt_token_ids", None)
    if not isinstance(prompt, list):
        return False
    request.prompt_token_ids = WatchedList(prompt, rec, str(request.request_id))
    return True


class WatchedList(list):  # type: ignore[type-arg]
    """A list that reports every operation that removes elements."""

    def __init__(self, items: list[Any], rec: Recorder, request_id: str) -> None:
        super().__init__(items)
        self._rec = rec
        self._request_id = request_id

    def _record(self, op: str, before: int) -> None:
        after = len(self)
        if after >= before:
            return
        frames = traceback.extract_stack()[:-2]
        vf = vllm_frames(frames)
        # Innermost vLLM frame is the statement that shrank the list; the ones
        # above it are its callers (the truncation helper's caller is the hook).
        self._rec.emit(
            "truncate",
            request_id=self._request_id,
            op=op,
            len_before=before,
            len_after=after,
            hook=self._rec.active_hook,
            stack=vf[-8:],
        )

    def pop(self, *args: Any) -> Any:  # type: ignore[override]
        before = len(self)
        value = super().pop(*args)
        self._record("pop()", before)
        return value

    def __delitem__(self, key: Any) -> None:
        before = len(self)
        super().__delitem__(key)
        self._record(f"del [{_slice_text(key)}]", before)

    def clear(self) -> None:
        before = len(self)
        super().clear()
        self._record("clear()", before)

    def remove(self, value: Any) -> None:
        before = len(self)
        super().remove(value)
        self._record("remove()", before)

    def __setitem__(self, key: Any, value: Any) -> None:
        before = len(self)
        super().__setitem__(key, value)
        self._record(f"[{_slice_text(key)}] = ...", before)


def _slice_text(key: Any) -> str:
    if isinstance(key, slice):
        parts = ["" if p is None else str(p) for p in (key.start, key.stop)]
        text = ":".join(parts)
        return text if key.step is None else f"{text}:{key.step}"
    return str(key)


def wrap_connector(rec: Recorder, connector: Any) -> list[str]:
    """Wrap the connector instance's scheduler-side hooks. Returns the wrapped names."""
    wrapped = []
    for name in CONNECTOR_HOOKS:
        original = getattr(connector, name, None)
        if original is None or not callable(original):
            continue
        setattr(connector, name, _hook_wrapper(rec, name, original))
        wrapped.append(name)
    return wrapped


def _hook_wrapper(rec: Recorder, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        req = _request_of(args, kwargs)
        rid = str(getattr(req, "request_id", "")) or None
        before = _num_tokens(req)
        rec.emit("hook_enter", hook=name, request_id=rid, num_tokens=before, args=_int_args(args))
        rec._hook_stack.append(name)
        try:
            result = original(*args, **kwargs)
        finally:
            rec._hook_stack.pop()
        after = _num_tokens(req)
        rec.emit("hook_exit", hook=name, request_id=rid, num_tokens=after, result=_plain(result))
        return result

    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapper


def wrap_lookups(rec: Recorder, kv_cache_manager: Any) -> list[str]:
    """Wrap the KV cache manager's local prefix-cache lookups on the instance."""
    wrapped = []
    for name in LOOKUP_METHODS:
        original = getattr(kv_cache_manager, name, None)
        if original is None or not callable(original):
            continue
        setattr(kv_cache_manager, name, _lookup_wrapper(rec, name, original))
        wrapped.append(name)
    return wrapped


def _lookup_wrapper(rec: Recorder, name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        req = _request_of(args, kwargs)
        rid = str(getattr(req, "request_id", "")) or None
        result = original(*args, **kwargs)
        hit = None
        if isinstance(result, tuple) and len(result) > 1 and isinstance(result[1], int):
            hit = int(result[1])
        rec.emit(
            "lookup",
            method=name,
            request_id=rid,
            num_tokens=_num_tokens(req),
            num_prompt_tokens=_num_prompt_tokens(req),
            hit_tokens=hit,
            hook=rec.active_hook,
        )
        return result

    wrapper.__wrapped__ = original  # type: ignore[attr-defined]
    return wrapper


def _int_args(args: tuple[Any, ...]) -> list[int]:
    return [a for a in args if isinstance(a, int) and not isinstance(a, bool)]


def _plain(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    return type(value).__name__


def summarize(rec: Recorder, request_id: str) -> wire.TruncationSummary:
    """The truncation verdict for one request, from the recorded events."""
    truncs = rec.of_kind("truncate", request_id)
    lookups = [e for e in rec.of_kind("lookup", request_id) if e.get("hit_tokens") is not None]
    first_trunc = truncs[0] if truncs else None
    hook = first_trunc.get("hook") if first_trunc else None
    before_lookup = None
    lookup_before_trunc = None
    if first_trunc is not None:
        earlier = [e for e in lookups if e["seq"] < first_trunc["seq"]]
        before_lookup = not earlier
        lookup_before_trunc = earlier[-1] if earlier else None
    stack = first_trunc.get("stack", []) if first_trunc else []
    statement = stack[-1] if stack else None
    caller = stack[-2] if len(stack) >= 2 else None
    hit = lookups[-1]["hit_tokens"] if lookups else None
    return {
        "hook": hook or "none",
        "before_lookup": before_lookup,
        "tokens_removed": sum(e["len_before"] - e["len_after"] for e in truncs),
        "op": first_trunc.get("op") if first_trunc else None,
        "statement": statement,
        "helper_call_site": caller,
        "stack": stack,
        "lookup_before": lookup_before_trunc,
        "hit_tokens": hit,
        "lookups": [
            {"method": e["method"], "num_tokens": e["num_tokens"], "hit_tokens": e["hit_tokens"]}
            for e in lookups
        ],
    }


def exception_location(exc: BaseException) -> wire.ExceptionLocation | None:
    """File:line and source text of the innermost vLLM frame of an exception."""
    frames = traceback.extract_tb(exc.__traceback__)
    vf = vllm_frames(list(frames))
    if not vf:
        return None
    inner = vf[-1]
    return {**inner, "stack": vf[-8:]}


def format_exception(exc: BaseException) -> str:
    return "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))


def python_info() -> dict[str, Any]:
    return {"executable": sys.executable, "version": sys.version.split()[0]}
