"""What a live scenario works with (the pair as the client sees it) and the decode engine's fate.

A scenario drives requests through `Ctx` (the client, P and D, the served model, W) and reads
what happened to D from what can be seen from outside: the HTTP status of its answer, /health,
whether its process still runs (local pair) and, when it died, the first fatal traceback in its
log with vLLM's file:line (`evidence.first_fatal`). The result is the scenario results' `Outcome`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vllm_pd_doctor.infra.progress import Progress
from vllm_pd_doctor.repro.live import engines, evidence
from vllm_pd_doctor.repro.live.client import Client
from vllm_pd_doctor.repro.live.client import Outcome as Answer
from vllm_pd_doctor.results.scenarios import Outcome

DEATH_WAIT_S = 15.0
"""How long a failed answer is followed by /health and the process before D counts as alive."""
EXIT_WAIT_S = 10.0
"""How long a dead D's process is given to exit (its exit code is reported, not judged)."""


@dataclass
class Side:
    """One engine of the pair as a scenario sees it; `engine` is None for a remote endpoint."""

    url: str
    engine: engines.Engine | None = None

    @property
    def log(self) -> Path | None:
        return self.engine.log if self.engine is not None else None

    @property
    def trace(self) -> Path | None:
        return self.engine.trace if self.engine is not None else None

    def exit_code(self) -> int | None:
        proc = self.engine.proc if self.engine is not None else None
        return proc.poll() if proc is not None else None


@dataclass
class Ctx:
    """One live scenario run: the pair, the served model, the effective block size W."""

    client: Client
    p: Side
    d: Side
    model: str
    block_size: int
    run_id: str
    progress: Progress
    notes: list[str] = field(default_factory=list)
    hybrid: bool | None = None
    """The served model has Mamba / linear-attention layers (None: not known, a remote pair)."""
    connector: str = ""
    """The registry key of the connector the pair runs (the cells' connector)."""

    def tag(self, name: str) -> str:
        """The request id of one request of the run (`X-Request-Id`; vLLM keeps it inside its own)."""
        return f"pdd-{self.run_id}-{name}"


@dataclass(frozen=True)
class Fate:
    """Whether D died, and what it left: HTTP status, /health after, exit code, the fatal error."""

    dead: bool
    http_status: int | None
    healthy_after: bool
    exit_code: int | None = None
    fatal: dict[str, Any] | None = None

    def observed(self) -> dict[str, Any]:
        return {
            "d_http_status": self.http_status,
            "d_healthy_after": self.healthy_after,
            "d_exit_code": self.exit_code,
            "d_died": self.dead,
        }


def d_alive_now(ctx: Ctx) -> bool:
    """A quick look: D's process runs (local) and /health answers."""
    return ctx.d.exit_code() is None and ctx.client.healthy(ctx.d.url)


def read_fate(ctx: Ctx, answer: Answer | None) -> Fate:
    """D's fate after `answer` (None: a request whose answer the client did not wait for)."""
    status = answer.status if answer is not None else None
    if status == 200 and d_alive_now(ctx):
        return Fate(dead=False, http_status=status, healthy_after=True)
    dead = False
    deadline = time.perf_counter() + (DEATH_WAIT_S if status != 200 else 2.0)
    while time.perf_counter() < deadline:
        if not d_alive_now(ctx):
            dead = True
            break
        time.sleep(0.5)
    if not dead:
        return Fate(dead=False, http_status=status, healthy_after=True)
    exit_deadline = time.perf_counter() + EXIT_WAIT_S
    while ctx.d.engine is not None and ctx.d.exit_code() is None and time.perf_counter() < exit_deadline:
        time.sleep(0.5)
    time.sleep(0.3)  # let the engine finish writing its traceback
    fatal = evidence.first_fatal(evidence.read_log(ctx.d.log)) if ctx.d.log is not None else None
    return Fate(dead=True, http_status=status, healthy_after=False, exit_code=ctx.d.exit_code(), fatal=fatal)


def outcome(fate: Fate, observed: dict[str, Any]) -> Outcome:
    """The run's outcome: held when D survived, else where and how it died."""
    seen = {**observed, **fate.observed()}
    if not fate.dead:
        return Outcome(failed=False, observed=seen)
    f = fate.fatal
    if f is None:
        return Outcome(
            failed=True,
            how="invariant",
            invariant=f"the decode engine died (HTTP {fate.http_status or '-'}, /health failing); "
            "its log, which says where, is not visible from here",
            observed=seen,
        )
    return Outcome(
        failed=True,
        how="assertion" if f["exception"] == "AssertionError" else "exception",
        location=f["location"],
        function=f["function"],
        statement=f["statement"],
        exception=f["exception"],
        message=f["message"],
        traceback=f["traceback"],
        observed=seen,
    )


def say_death(ctx: Ctx, fate: Fate) -> None:
    if fate.dead:
        f = fate.fatal or {}
        ctx.progress(
            f"the decode engine DIED: {f.get('exception') or '?'} at {f.get('location') or '?'} "
            f"({f.get('statement') or f.get('message') or 'see its log'}); exit code {fate.exit_code}"
        )
