"""What the engines leave behind, read back: /metrics pages, engine logs, the plugin's trace.

Pure functions over text and files; nothing here talks to an engine.
"""

from __future__ import annotations

import contextlib
import json
import re
from pathlib import Path
from typing import Any

from vllm_pd_doctor.infra import tracebacks
from vllm_pd_doctor.invllm import observe, wire
from vllm_pd_doctor.knowledge.facts import connectors

ASSERT_53514 = "assert num_new_tokens > 0"
FILE_LINE_RE = re.compile(r'File "([^"]*/vllm/[^"]+)", line (\d+), in (\w+)\n\s*(.*)')
_BLOCK_SIZE_RE = re.compile(r'block_size="(\d+)"')
_ERROR_LEVEL_RE = re.compile(r"^.*\bERROR \d\d-\d\d ", re.M)
_ERROR_LINE_RE = re.compile(r"\b([A-Z]\w*(?:Error|Exception)): (.+)$")


# --- /metrics ------------------------------------------------------------------------------


def block_size_from_metrics(text: str) -> int | None:
    """The effective KV block size W (`vllm:cache_config_info`, label `block_size`)."""
    for line in text.splitlines():
        if line.startswith("vllm:cache_config_info"):
            m = _BLOCK_SIZE_RE.search(line)
            if m:
                return int(m.group(1))
    return None


def nixl_metrics(text: str) -> dict[str, float]:
    """The NIXL lines of a /metrics page (summed over label sets)."""
    found: dict[str, float] = {}
    for line in text.splitlines():
        if line.startswith("#") or connectors.NIXL_LIBRARY not in line.lower():
            continue
        name = line.split("{", 1)[0].split(" ", 1)[0]
        if name.endswith(("_created", "_bucket")):  # timestamps, cumulative buckets
            continue
        try:
            value = float(line.rsplit(" ", 1)[1])
        except (IndexError, ValueError):
            continue
        found[name] = found.get(name, 0.0) + value
    return found


def transfer_summary(metrics: dict[str, float]) -> dict[str, Any]:
    """Bytes, transfers and failures from the decode engine's transfer metrics."""

    def pick(*words: str, suffix: str = "") -> float | None:
        vals = [v for k, v in metrics.items() if all(w in k for w in words) and k.endswith(suffix)]
        return sum(vals) if vals else None

    return {
        "bytes": pick("bytes", suffix="_sum") or pick("bytes"),
        "transfers": pick("xfer_time", suffix="_count") or pick("bytes", suffix="_count"),
        "failures": pick("fail"),
        "metrics": metrics,
    }


# --- logs ----------------------------------------------------------------------------------


def tail(path: Path, n: int = 40) -> str:
    """The last `n` lines of a file ("" when it cannot be read)."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    return "\n".join(lines[-n:])


def read_log(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def assertion_from_log(text: str) -> dict[str, Any] | None:
    """The assertion (or other fatal error) and its traceback from an engine log.

    The traceback holding #53514's assertion if there is one, else the last one; the location is
    its innermost vLLM frame.
    """
    tbs = tracebacks.tracebacks(text)
    ours = [tb for tb in tbs if any(ASSERT_53514 in line for line in tb)]
    matches = bool(ours) or ASSERT_53514 in text
    if (
        not tbs
        and not matches
        and "EngineCore encountered a fatal error" not in text
        and "EngineDeadError" not in text
    ):
        return None
    tb = "\n".join((ours or tbs)[-1]) if tbs else None
    location = statement = None
    if tb:
        frames = FILE_LINE_RE.findall(tb)
        if frames:
            f, line_no, _fn, code = frames[-1]
            location = f"{observe.vllm_relpath(f)}:{line_no}"
            statement = code.strip()
    if matches and statement is None:
        statement = ASSERT_53514
    return {"location": location, "statement": statement, "traceback": tb, "matches_53514": matches}


def fatal_line(text: str) -> str | None:
    """The last `SomethingError: message` line of a log, without its prefix."""
    found = None
    for line in text.splitlines():
        m = _ERROR_LINE_RE.search(line)
        if m and m.group(1) not in ("EngineDeadError", "RuntimeError"):
            found = f"{m.group(1)}: {m.group(2)}"[:300]
    return found


# --- the plugin's trace --------------------------------------------------------------------


def read_trace(path: Path) -> list[dict[str, Any]]:
    """The events pd-doctor's vLLM plugin wrote (JSON lines; unreadable lines skipped)."""
    events: list[dict[str, Any]] = []
    try:
        with open(path, encoding="utf-8") as fh:
            for line in fh:
                with contextlib.suppress(json.JSONDecodeError):
                    events.append(json.loads(line))
    except OSError:
        pass
    return events


def trace_for(events: list[dict[str, Any]], tag: str) -> observe.Recorder:
    """A Recorder holding the events of the engine requests whose id contains `tag`."""
    rec = observe.Recorder()
    for i, ev in enumerate(events):
        rid = ev.get("request_id")
        if isinstance(rid, str) and tag in rid:
            rec.events.append({**ev, "seq": i, "request_id": tag})
        elif ev.get("kind") == "exception" and rec.events:
            rec.events.append({**ev, "seq": i})
    return rec


def summary_for(events: list[dict[str, Any]], tag: str) -> wire.TruncationSummary | None:
    """The watchers' truncation summary of the request `tag` (None: no event of it)."""
    rec = trace_for(events, tag)
    return observe.summarize(rec, tag) if rec.events else None


def conv_layout_restored(events: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(from, to) of each Mamba conv-state layout the plugin put back in an engine process."""
    found = {
        (str(e.get("from")), str(e.get("to")))
        for e in events
        if e.get("kind") == "conv_state_layout_restored"
    }
    return sorted(found)


def hotfix_line(log_text: str) -> str | None:
    """The one line pd-doctor's hotfix logs at start in the EngineCore (what it patched)."""
    for line in log_text.splitlines():
        i = line.find("pd-doctor hotfix ")
        if i >= 0:
            return line[i:].strip()
    return None


# --- an engine's death (the live scenarios) ---------------------------------------------------


def first_fatal(text: str) -> dict[str, Any] | None:
    """The first traceback of a log that ends in an AssertionError (else the first that ends in
    any other error but vLLM's own wrappers), with its innermost vLLM frame: where the engine
    died. The wrappers (the EngineCore's RuntimeError "Worker failed", the API server's
    EngineDeadError) come later in the log and say nothing of the cause. Tracebacks before the
    first ERROR line are warnings the engine survived (vLLM logs its tokenizer warm-up's)."""
    m = _ERROR_LEVEL_RE.search(text)
    tbs = tracebacks.tracebacks(text[m.start() :] if m else text)
    asserted = [tb for tb in tbs if tb and tb[-1].strip().startswith("AssertionError")]
    others = [tb for tb in tbs if tb and not _is_wrapper(tb[-1])]
    if not (asserted or others):
        return None
    found = (asserted or others)[0]
    tb = "\n".join(found)
    frames = FILE_LINE_RE.findall(tb)
    last = found[-1].strip()
    kind, _, message = last.partition(":")
    out: dict[str, Any] = {
        "exception": kind.strip().rsplit(".", 1)[-1],
        "message": message.strip() or None,
        "traceback": tb,
        "location": None,
        "function": None,
        "statement": None,
    }
    if frames:
        f, line_no, fn, code = frames[-1]
        out.update(location=f"{observe.vllm_relpath(f)}:{line_no}", function=fn, statement=code.strip())
    return out


def _is_wrapper(line: str) -> bool:
    s = line.strip()
    return "EngineDeadError" in s or s.startswith("RuntimeError: Worker failed") or "CancelledError" in s


def gauge(text: str, name: str) -> float | None:
    """A /metrics value summed over its label sets (None: the page does not have it)."""
    found = None
    for line in text.splitlines():
        if line.startswith(name) and line[len(name) : len(name) + 1] in ("{", " "):
            with contextlib.suppress(IndexError, ValueError):
                found = (found or 0.0) + float(line.rsplit(" ", 1)[1])
    return found
