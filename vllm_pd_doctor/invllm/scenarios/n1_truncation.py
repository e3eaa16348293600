"""n1-truncation: vLLM #53514, today's `pd-doctor repro` run, as one scenario among the others.

The harness's own run (`harness.run_connector`: warm-up, the N-1 trigger, the control with a prompt
one token longer) on a P-side (kv_producer) scheduler; only #53514's `assert num_new_tokens > 0` in
Scheduler.schedule counts as the failure. A model with no Mamba state cannot have it.
"""

from __future__ import annotations

from typing import Any

from .. import harness
from .common import Ctx, NotApplicable, Outcome

KV_ROLE = "kv_producer"


def _outcome(a: dict[str, Any], observed: dict[str, Any]) -> Outcome:
    fired = bool(a.get("fired"))
    return {
        "failed": fired,
        "how": a.get("kind") if fired else None,
        "exception": a.get("exception"),
        "message": a.get("message"),
        "location": a.get("location"),
        "function": a.get("function"),
        "statement": a.get("statement"),
        "traceback": a.get("traceback"),
        "invariant": None,
        "matches_53514": bool(a.get("matches_53514")),
        "observed": observed,
    }


def run(ctx: Ctx, key: str, vllm_name: str) -> dict[str, Any]:
    setup = ctx.setup(KV_ROLE)
    if not setup.facts["has_mamba_state"]:
        raise NotApplicable("this model has no Mamba state (vLLM's model class says so)")
    setup.spec.setdefault("triggers", ["same-prompt"])
    r = harness.run_connector(setup, key, vllm_name)
    c = r["control"]
    recipe = _outcome(
        dict(r["assertion"]),
        {
            "hook": r["truncation"]["hook"],
            "before_lookup": r["truncation"]["before_lookup"],
            "hit_tokens": r["prefix_cache"]["hit_tokens"],
            "prompt_len": r["config"]["prompt_len"],
            "block_size": r["config"]["block_size"],
        },
    )
    control = {
        "failed": c["assertion_fired"],
        "how": c["assertion_kind"],
        "location": c["assertion_location"],
        "statement": c["assertion_statement"],
        "invariant": None,
        "observed": {"prompt_len": c["prompt_len"], "hit_tokens": c["hit_tokens"]},
    }
    return {"recipe": recipe, "control": control, "notes": list(r.get("notes", []))}
