"""The harness's answer for one connector: its sizes, triggers, control, or what stopped it.

Runs INSIDE the target vLLM interpreter (stdlib + vllm only). Turns what `triggers.py`'s runs
and `kvconfig.Setup`'s builds return into the typed pieces of `wire.HarnessAnswer`.
"""

from __future__ import annotations

import importlib.util
import traceback
from typing import TYPE_CHECKING, Any, cast

from . import connectors, drive, wire

if TYPE_CHECKING:
    from .kvconfig import Setup


def conn(key: str) -> connectors.Connector:
    c = connectors.get(key)
    if c is None:
        raise drive.InternalsError("find the connector", f"{key!r} is not in pd-doctor's registry")
    return c


def library_status(module: str) -> wire.TransferLibrary:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    return {"module": module, "installed": spec is not None, "needed_for_scheduler": False}


def control_answer(control: dict[str, Any], events: list[wire.Event]) -> wire.ControlRun:
    """The control run as the answer lists it."""
    return {
        "prompt_len": control["prompt_len"],
        "assertion_fired": control["assertion"]["fired"],
        "assertion_location": control["assertion"]["location"],
        "assertion_statement": control["assertion"]["statement"],
        "matches_53514": control["assertion"]["matches_53514"],
        "assertion_kind": control["assertion"]["kind"],
        "hit_tokens": control["hit_tokens"],
        "scheduled_tokens": control["scheduled_tokens"],
        "truncation_hook": control["truncation"]["hook"],
        "prompt": control["prompt"],
        "events": events,
    }


def _config(setup: Setup, sz: dict[str, Any], n: int, budget: int) -> wire.ScenarioConfig:
    """The run's config as the answer lists it (the sizes vLLM chose, what was asked)."""
    spec = setup.spec
    return {
        "block_size": int(sz["effective_block_size"]),
        "requested_block_size": spec.get("block_size"),
        "hash_block_size": int(sz["hash_block_size"]),
        "scheduler_block_size": sz["scheduler_block_size"],
        "prefix_match_unit": sz["prefix_match_unit"],
        "platform": setup.platform,
        "prompt_len": n,
        "blocks": spec.get("blocks"),
        "max_model_len": sz["max_model_len"],
        "max_num_batched_tokens": budget,
        "mamba_cache_mode": sz["mamba_cache_mode"],
        "requested_mamba_cache_mode": spec.get("mamba_cache_mode"),
        "kv_role": spec["kv_role"],
        "model_dir": setup.model_dir,
    }


def connector_answer(
    setup: Setup,
    key: str,
    vllm_name: str,
    sz: dict[str, Any],
    n: int,
    budget: int,
    runs: list[dict[str, Any]],
    control: wire.ControlRun,
) -> wire.ConnectorResult:
    """One connector's answer: sizes (`sz`, for N = `n` under `budget`), the first trigger's
    facts, every trigger, the control."""
    first = runs[0]
    lib = library_status(conn(key).library)
    return {
        "connector": key,
        "connector_label": conn(key).label,
        "kv_connector": vllm_name,
        "connector_class": first["connector_class"],
        "connector_scheduler_class": first["connector_scheduler_class"],
        "transfer_library": lib,
        "config": _config(setup, sz, n, budget),
        "sizing": sz,
        "model": setup.facts,
        "assertion": first["assertion"],
        "truncation": first["truncation"],
        "prefix_cache": {"hit_tokens": first["hit_tokens"], "lookups": first["truncation"]["lookups"]},
        "prompt": first["prompt"],
        "scheduled_tokens": first["scheduled_tokens"],
        "warmup": first["warmup"],
        "wrapped": first["wrapped"],
        "trigger": first["name"],
        "triggers": [trigger_entry(r) for r in runs],
        "control": control,
        "events": first["events"],
    }


def trigger_entry(run: dict[str, Any]) -> wire.TriggerRun:
    """One trigger run as the answer lists it: no warm-up, wrapping or sizing detail."""
    entry = {k: v for k, v in run.items() if k not in ("warmup", "wrapped", "sizing")}
    entry["block_size"] = run["sizing"]["effective_block_size"]
    return cast(wire.TriggerRun, entry)  # triggers.run_variant builds it key by key


def connector_error(key: str, vllm_name: str, stage: str, message: str) -> wire.ConnectorResult:
    return {
        "connector": key,
        "connector_label": conn(key).label,
        "kv_connector": vllm_name,
        "error": {
            "kind": "internals",
            "stage": stage,
            "message": message,
            "traceback": traceback.format_exc(),
        },
    }
