"""The trigger's timeline as a Mermaid sequence diagram (GitHub renders it inside an issue).

Pure functions from model types to text. Participants: the Scheduler, the KV cache manager
(local prefix-cache lookup) and the KV connector's scheduler half; messages come from the
events recorded inside vLLM: the lookup with its hit, the connector hooks, the truncation,
the assertion (or the scheduled tokens when it did not fire).
"""

from __future__ import annotations

from collections.abc import Iterable

from vllm_pd_doctor.results.repro import ConnectorVerdict, Event

_UNSAFE = str.maketrans({";": ",", "#": "", "\n": " ", '"': "'", "{": "(", "}": ")"})


def _text(value: object, limit: int = 90) -> str:
    s = str(value).translate(_UNSAFE).strip()
    return s if len(s) <= limit else s[: limit - 3] + "..."


def _lines(events: Iterable[Event], phase: str) -> list[str]:
    out: list[str] = []
    for e in events:
        if e.phase != phase:
            continue
        d = e.detail
        if e.kind == "add_request":
            out.append(f"    Note over S: trigger request, {d.get('num_tokens')} prompt tokens")
        elif e.kind == "hook_enter":
            out.append(f"    S->>C: {_text(d.get('hook'))} ({d.get('num_tokens')} tokens)")
        elif e.kind == "lookup":
            out.append(f"    S->>K: {_text(d.get('method'))} ({d.get('num_tokens')} tokens)")
            out.append(f"    K-->>S: local hit {d.get('hit_tokens')} tokens")
        elif e.kind == "truncate":
            stack = d.get("stack") or [{}]
            fn = stack[-1].get("function") if isinstance(stack[-1], dict) else None
            out.append(
                f"    Note over C: prompt truncated {d.get('len_before')} -> "
                f"{d.get('len_after')} ({_text(d.get('op'))} in {_text(fn)})"
            )
        elif e.kind == "preempted":
            out.append(f"    Note over S: preempted via {_text(d.get('via'))}, rescheduled")
        elif e.kind == "scheduled" and d.get("scheduled_tokens"):
            out.append(
                f"    S->>S: schedule {d.get('scheduled_tokens')} new tokens "
                f"(computed {d.get('num_computed_tokens')})"
            )
        elif e.kind in ("assertion", "exception"):
            out.append(
                f"    Note over S: {_text(d.get('exception') or 'AssertionError')}: "
                f"{_text(d.get('statement'))} at {_text(d.get('location'))}"
            )
        elif e.kind == "finished":
            out.append("    S-->>C: request finished (prefill done)")
    return out


def sequence_diagram(r: ConnectorVerdict, phase: str = "trigger") -> str:
    """A `sequenceDiagram` of one verdict's trigger request (empty when nothing was recorded)."""
    body = _lines(r.events, phase)
    if not body:
        return ""
    head = [
        "sequenceDiagram",
        "    participant S as Scheduler",
        "    participant K as KV cache manager",
        f"    participant C as {_text(r.kv_connector, 40)}",
    ]
    return "\n".join(head + body) + "\n"


def fenced(r: ConnectorVerdict) -> str:
    """The diagram inside a ```mermaid fence, or an empty string."""
    diagram = sequence_diagram(r)
    return f"```mermaid\n{diagram}```\n" if diagram else ""
