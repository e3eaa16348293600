"""What `pd-doctor repro` answers, on either engine: the verdict per connector, what vLLM did
(assertion, truncation, control, timeline) and the report (frozen dataclasses)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from vllm_pd_doctor.invllm import wire
from vllm_pd_doctor.results.base import Result


@dataclass(frozen=True)
class Frame:
    """One frame of vLLM's stack, path relative to the vllm package's parent."""

    file: str
    line: int
    function: str
    code: str = ""

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"

    @classmethod
    def from_dict(cls, d: wire.Frame | dict[str, Any] | None) -> Frame | None:
        if not d:
            return None
        return cls(
            file=str(d.get("file", "?")),
            line=int(d.get("line", 0) or 0),
            function=str(d.get("function", "?")),
            code=str(d.get("code", "") or ""),
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "file": self.file,
            "line": self.line,
            "function": self.function,
            "code": self.code,
            "location": self.location,
        }


@dataclass(frozen=True)
class Assertion:
    """Whether the scheduler's `assert num_new_tokens > 0` (or another assert) fired."""

    fired: bool
    location: str | None = None
    """vLLM file:line of the assert that fired."""
    statement: str | None = None
    """Source text of that line."""
    matches_53514: bool = False
    """True when the statement is vLLM's `assert num_new_tokens > 0` in `Scheduler.schedule`."""
    traceback: str | None = None
    kind: str | None = None
    """`assertion` or `exception` (another failure inside vLLM) when it fired."""
    message: str | None = None


@dataclass(frozen=True)
class Truncation:
    """What shortened the P-side prompt, and when relative to the local prefix-cache lookup."""

    hook: str
    """`on_new_request`, `get_num_new_matched_tokens`, another hook name, or `none`."""
    before_lookup: bool | None
    """True: truncated before the local prefix-cache lookup (fixed order). None: no truncation."""
    tokens_removed: int = 0
    operation: str | None = None
    """How the list shrank, e.g. `pop()` or `del [-1:]`."""
    statement: Frame | None = None
    """The vLLM statement that shrank the prompt (inside the truncation helper)."""
    call_site: Frame | None = None
    """Where the truncation helper was called from (inside the hook)."""
    stack: tuple[Frame, ...] = ()

    @classmethod
    def from_observed(cls, summary: wire.TruncationSummary | None, *, missing: str = "none") -> Truncation:
        """From the watchers' summary of one request (`invllm/observe.py` `summarize`), as both
        engines report it; `missing` is the hook named when there is no summary at all."""
        if not summary:
            return cls(hook=missing, before_lookup=None)
        frames = (Frame.from_dict(d) for d in summary.get("stack") or ())
        return cls(
            hook=str(summary.get("hook") or "none"),
            before_lookup=summary.get("before_lookup"),
            tokens_removed=int(summary.get("tokens_removed") or 0),
            operation=summary.get("op"),
            statement=Frame.from_dict(summary.get("statement")),
            call_site=Frame.from_dict(summary.get("helper_call_site")),
            stack=tuple(f for f in frames if f is not None),
        )


@dataclass(frozen=True)
class Control:
    """The same scenario with a prompt one token longer: a hit of N-2, not N-1."""

    prompt_len: int
    assertion_fired: bool
    hit_tokens: int | None
    scheduled_tokens: int
    truncation_hook: str
    label: str = "control"
    """How the control was made, as the reports title it (with its prompt and actual hit)."""
    matches_53514: bool = False
    """The control fired vLLM's `assert num_new_tokens > 0` (counts as reproduced)."""
    location: str | None = None
    statement: str | None = None


@dataclass(frozen=True)
class Event:
    """One step of the timeline, as recorded inside vLLM."""

    seq: int
    t_ms: float
    phase: str
    kind: str
    request_id: str | None = None
    detail: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> Event:
        known = {"seq", "t_ms", "phase", "kind", "request_id"}
        return cls(
            seq=int(d.get("seq", 0)),
            t_ms=float(d.get("t_ms", 0.0)),
            phase=str(d.get("phase", "")),
            kind=str(d.get("kind", "")),
            request_id=d.get("request_id"),
            detail={k: v for k, v in d.items() if k not in known},
        )

    def to_dict(self) -> dict[str, Any]:
        return {
            "seq": self.seq,
            "t_ms": self.t_ms,
            "phase": self.phase,
            "kind": self.kind,
            "request_id": self.request_id,
            **self.detail,
        }


@dataclass(frozen=True)
class RunError:
    """Why a check could not run (stage and what was found)."""

    kind: str
    stage: str
    message: str
    traceback: str | None = None


@dataclass(frozen=True)
class ScenarioConfig:
    block_size: int
    """Effective (attention) block size W, after the release's hybrid alignment."""
    prompt_len: int
    mamba_cache_mode: str
    """Effective mode, after vLLM's rewrites (none -> align with prefix caching, all -> align)."""
    kv_role: str
    model: str
    requested_block_size: int | None = None
    """--block-size as given (None: the platform's default)."""
    hash_block_size: int | None = None
    """Prefix-cache hash granularity (vLLM's hash_block_size / prefix_match_unit)."""
    platform: str | None = None
    max_num_batched_tokens: int | None = None


@dataclass(frozen=True)
class TriggerRun:
    """One trigger variant (same-prompt, shared-prefix, chunked, preempt) and what vLLM did."""

    name: str
    description: str
    prompt_len: int
    assertion: Assertion
    hit_tokens: int | None = None
    truncation_hook: str = "none"
    before_lookup: bool | None = None
    truncations: int = 0
    """How many times the prompt shrank (1 = idempotent across a preemption)."""
    prompt_len_after: int | None = None
    scheduled_tokens: int | None = None
    max_num_batched_tokens: int | None = None
    warmup_len: int | None = None
    preempted_by: str | None = None
    events: tuple[Event, ...] = ()

    @property
    def summary(self) -> str:
        """One line: prompt, hit, what fired, how often the prompt was truncated."""
        a = self.assertion
        fired = (
            ("#53514 assert fired" if a.matches_53514 else f"{a.kind or 'error'} at {a.location}")
            if a.fired
            else "did not fire"
        )
        extra = f", preempted via {self.preempted_by}" if self.preempted_by else ""
        return (
            f"prompt {self.prompt_len}, hit {self.hit_tokens}, {fired}, truncated "
            f"{self.truncations}x by {self.truncation_hook}{extra}"
        )


@dataclass(frozen=True)
class HotfixPatch:
    """What the opt-in #53514 hotfix (`repro --hotfix`, invllm/hotfix.py) did to one class."""

    connector: str
    class_name: str
    status: str
    """patched, already patched, not needed, refused, no truncation, unavailable (or patch:
    planned, in `hotfix status`)."""
    reason: str
    kv_connectors: tuple[str, ...] = ()
    hook: str | None = None
    scheduler_class: str | None = None
    helper: str | None = None
    helper_at: str | None = None
    late_call_at: str | None = None
    early_call_at: str | None = None
    guard: str | None = None
    guard_source: str | None = None
    """release (the release's own `_p_side_truncated` guard) or added (pd-doctor's)."""

    @property
    def applied(self) -> bool:
        return self.status in ("patched", "already patched")


@dataclass(frozen=True)
class ConnectorVerdict:
    """The repro verdict for one connector on one vLLM installation."""

    connector: str
    """Our key: nixl, nixl-push, mooncake, moriio."""
    label: str
    kv_connector: str
    """vLLM's connector name (kv_connector in kv-transfer-config)."""
    connector_class: str | None = None
    connector_scheduler_class: str | None = None
    transfer_library: str | None = None
    transfer_library_installed: bool | None = None
    config: ScenarioConfig | None = None
    assertion: Assertion | None = None
    truncation: Truncation | None = None
    hit_tokens: int | None = None
    prompt_len_before: int | None = None
    prompt_len_after: int | None = None
    scheduled_tokens: int | None = None
    control: Control | None = None
    events: tuple[Event, ...] = ()
    error: RunError | None = None
    elapsed_s: float | None = None
    triggers: tuple[TriggerRun, ...] = ()
    """Every trigger variant run (the first one fills the fields above)."""
    notes: tuple[str, ...] = ()
    sizing: dict[str, Any] = field(default_factory=dict)
    """How vLLM sized the KV cache (platform, backend, before/after alignment, groups)."""
    hotfix: tuple[HotfixPatch, ...] | None = None
    """None: no hotfix asked; else what it did to this connector's classes."""

    @property
    def hotfix_verdict(self) -> str | None:
        """'fixed by hotfix', 'not fixed by hotfix', or 'hotfix not applied: ...' (None: not asked)."""
        if self.hotfix is None or not self.ran:
            return None
        if not any(p.applied for p in self.hotfix):
            why = "; ".join(f"{p.class_name}: {p.status} ({p.reason})" for p in self.hotfix)
            return f"hotfix not applied: {why or 'no class of this connector found'}"
        a, t, c = self.assertion, self.truncation, self.control
        ok = (
            a is not None
            and not a.fired
            and t is not None
            and t.hook == "on_new_request"
            and t.before_lookup is True
            and t.tokens_removed >= 1
            and c is not None
            and not c.assertion_fired
        )
        return "fixed by hotfix" if ok else "NOT fixed by hotfix"

    @property
    def ran(self) -> bool:
        return self.error is None and self.assertion is not None

    @property
    def reproduced(self) -> bool:
        """#53514's assertion fired on a trigger or on the control (nothing else counts).

        An assertion whose `kind` is unknown (a remote engine that died without a trace to
        confirm what fired) keeps counting as fired: there is nothing more to tell it apart.
        """
        if not self.ran:
            return False
        fired = [self.assertion] + [t.assertion for t in self.triggers]
        return any(a is not None and a.fired and (a.matches_53514 or a.kind is None) for a in fired) or (
            self.control is not None and self.control.matches_53514
        )

    @property
    def unexpected(self) -> Assertion | None:
        """Another assertion or exception inside vLLM (not #53514's), if one fired."""
        for a in [self.assertion] + [t.assertion for t in self.triggers]:
            if a is not None and a.fired and a.kind is not None and not a.matches_53514:
                return a
        return None


@dataclass(frozen=True)
class VllmInstall:
    version: str
    path: str
    python: str


@dataclass(frozen=True)
class NotAffected:
    """The model has no Mamba state: #53514 cannot happen with it, and vLLM's evidence."""

    reason: str
    architecture: str | None = None
    model_class: str | None = None
    is_hybrid: bool | None = None
    is_attention_free: bool | None = None
    has_mamba_state_classmethods: bool | None = None
    evidence: dict[str, Any] = field(default_factory=dict)
    """Everything the harness found about the model (the fields above come from it)."""

    @classmethod
    def from_answer(cls, reason: str, evidence: dict[str, Any]) -> NotAffected:
        def flag(key: str) -> bool | None:
            v = evidence.get(key)
            return None if v is None else bool(v)

        arch = evidence.get("architecture")
        cls_name = evidence.get("model_class")
        return cls(
            reason=reason,
            architecture=None if arch is None else str(arch),
            model_class=None if cls_name is None else str(cls_name),
            is_hybrid=flag("is_hybrid"),
            is_attention_free=flag("is_attention_free"),
            has_mamba_state_classmethods=flag("has_mamba_state_classmethods"),
            evidence=dict(evidence),
        )


@dataclass(frozen=True)
class ReproReport(Result):
    """Everything one `pd-doctor repro` run found."""

    engine: str
    vllm: VllmInstall
    results: tuple[ConnectorVerdict, ...]
    available_connectors: tuple[str, ...] = ()
    timings: dict[str, float] = field(default_factory=dict)
    notes: tuple[str, ...] = ()
    not_affected: NotAffected | None = None
    """Set when the model has no Mamba state: the reason and vLLM's evidence (no results)."""

    @property
    def reproduced(self) -> bool:
        return any(r.reproduced for r in self.results)

    @property
    def unexpected(self) -> Assertion | None:
        return next((u for r in self.results if (u := r.unexpected) is not None), None)

    @property
    def any_ran(self) -> bool:
        return any(r.ran for r in self.results)
