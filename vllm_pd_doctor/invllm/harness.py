"""In-process repro of vLLM #53514 on the real vLLM scheduler.

Runs INSIDE the target vLLM interpreter, as `python -m <pkg>.harness --spec JSON --out FILE`.
Needs only the stdlib and the installed vLLM (and the torch it brings). For the user's model
config `kvconfig.Setup` asks vLLM for the model class and its Mamba state, sizes the KV cache
blocks with the platform's own code (`sizing.py`), builds vLLM's real `Scheduler` with the real
KV connector scheduler half and the real KV cache manager over vLLM's own KV cache groups; this
module then runs the trigger variants (`triggers.py`) and a control, and observes what happens.
The answer (`answers.py` builds each connector's) is one JSON document written to --out.
"""

from __future__ import annotations

import argparse
import json
import os
import time
import traceback
from typing import Any

from . import answers, connectors, drive, hotfix, observe, platformrules, triggers, wire
from .kvconfig import NUM_BLOCKS, ModelError, NotServable, Setup, build_scheduler

SCHEMA_VERSION = wire.SCHEMA_VERSION
InternalsError = drive.InternalsError
construct = drive.construct
library_status = answers.library_status

__all__ = [
    "NUM_BLOCKS",
    "SCHEMA_VERSION",
    "InternalsError",
    "ModelError",
    "NotServable",
    "Setup",
    "available_connectors",
    "build_scheduler",
    "check_importable",
    "connector_registry",
    "construct",
    "library_status",
    "main",
    "run",
    "run_connector",
    "vllm_facts",
]


# --------------------------------------------------------------------------- vLLM facts


def vllm_facts() -> wire.VllmFacts:
    import vllm

    return {
        "version": str(getattr(vllm, "__version__", "unknown")),
        "path": os.path.dirname(os.path.abspath(vllm.__file__)),
    }


def connector_registry() -> dict[str, Any]:
    factory = drive.import_first(
        "import KVConnectorFactory",
        [("vllm.distributed.kv_transfer.kv_connector.factory", "KVConnectorFactory")],
    )
    registry = getattr(factory, "_registry", None)
    if not isinstance(registry, dict):
        raise InternalsError("read the KV connector registry", "KVConnectorFactory has no _registry dict")
    return registry


def available_connectors(registry: dict[str, Any]) -> dict[str, str]:
    found = {}
    for c in connectors.all_connectors():
        for name in c.vllm_names:
            if name in registry:
                found[c.key] = name
                break
    return found


# --------------------------------------------------------------------------- runs


def run_connector(setup: Setup, key: str, vllm_name: str) -> wire.ConnectorResult:
    spec = setup.spec
    t0 = time.perf_counter()
    probe = setup.build(vllm_name, 2048)
    sz = probe["sizing"]
    w = int(sz["effective_block_size"])
    hash_bs = int(sz["hash_block_size"])
    n = int(spec.get("prompt_len") or (int(spec.get("blocks") or 1) * w + 1))
    if n + w + 1 > int(sz["model_max_model_len"]):
        raise InternalsError(
            "size the prompt",
            f"N = {n} (+ one block for the preempt "
            f"trigger) is longer than the model's max_model_len "
            f"{sz['model_max_model_len']}",
        )
    budget = max(2048, n + w + 1)
    vocab = int(setup.hf_config.get("vocab_size") or 512)
    factory = setup.scheduler_factory(vllm_name)
    wanted = spec.get("triggers") or ["same-prompt"]
    runs = []
    for name in wanted:
        rec = observe.Recorder()
        res = triggers.run_variant(name, factory, n, w, vocab, budget, rec)
        res["events"] = rec.events
        res["sizing"] = setup.build(vllm_name, res["max_num_batched_tokens"])["sizing"]
        runs.append(res)
    # The control: one token more, so the cached prefix is below N-1 of the prompt.
    control_rec = observe.Recorder()
    control = triggers.run_variant(
        "same-prompt", factory, n + 1, w, vocab, budget, control_rec, phase_prefix="control-"
    )
    notes = [x for x in (triggers.granularity_note(n, hash_bs),) if x]
    notes += [r["why_not_fired"] for r in runs if r.get("why_not_fired")]
    notes += [
        f"{setup.platform} judged from a {platformrules.running()} box, not from vLLM: {d}"
        for d in sz["not_from_vllm"]
    ]
    answer = answers.connector_answer(
        setup, key, vllm_name, sz, n, budget, runs, answers.control_answer(control, control_rec.events)
    )
    answer.update({"notes": notes, "elapsed_s": round(time.perf_counter() - t0, 3)})
    return answer


def check_importable(registry: dict[str, Any], vllm_name: str) -> None:
    """Load the connector's class the way the factory would; say what is missing if not."""
    loader = registry.get(vllm_name)
    try:
        if callable(loader):
            loader()
    except ImportError as exc:
        missing = getattr(exc, "name", None)
        detail = (
            f"it needs the Python module {missing!r}, not installed in this environment (install it "
            "there, e.g. `uv pip install --python <this python> " + str(missing).split(".")[0] + "`; "
            "pd-doctor's own environments, --vllm X, carry it)"
            if missing
            else f"{type(exc).__name__}: {exc}"
        )
        raise InternalsError("import the connector", f"{vllm_name} cannot be loaded: {detail}") from exc


def _run_one(setup: Setup, registry: dict[str, Any], key: str, vllm_name: str) -> wire.ConnectorResult:
    """One connector's run, or what stopped it (the other connectors still run)."""
    try:
        check_importable(registry, vllm_name)
        return run_connector(setup, key, vllm_name)
    except InternalsError as exc:
        answer = answers.connector_error(key, vllm_name, exc.stage, exc.message)
        answer["error"]["kind"] = getattr(exc, "kind", "internals")
        return answer
    except Exception as exc:
        return answers.connector_error(key, vllm_name, "run the connector", f"{type(exc).__name__}: {exc}")


def _wanted(asked: list[str], present: dict[str, str]) -> tuple[list[str], wire.Error | None]:
    """The connector keys to run (["all"]: every one this vLLM has), or the error naming the
    asked ones it lacks."""
    if asked == ["all"]:
        return [k for k in connectors.connector_keys() if k in present], None
    missing = [k for k in asked if k not in present]
    if not missing:
        return asked, None
    return asked, {
        "kind": "connector_missing",
        "stage": "find the connector",
        "message": f"this vLLM has no {', '.join(missing)} connector "
        f"(it has: {', '.join(sorted(present)) or 'none'})",
    }


def run(spec: dict[str, Any]) -> wire.HarnessAnswer:
    out: wire.HarnessAnswer = {
        "schema_version": SCHEMA_VERSION,
        "engine": "inprocess",
        "python": observe.python_info(),
        "spec": spec,
    }
    t0 = time.perf_counter()
    try:
        import vllm
        import vllm.config
        import vllm.v1.core.sched.scheduler  # noqa: F401 - no vLLM: say so here
    except ImportError as exc:
        out["error"] = {"kind": "no_vllm", "stage": "import vllm", "message": f"{type(exc).__name__}: {exc}"}
        return out
    try:
        if not _fill(spec, out, t0):
            return out
    except InternalsError as exc:
        out["error"] = _internals_error(exc)
    except Exception as exc:
        out["error"] = {
            "kind": "internals",
            "stage": "run the harness",
            "message": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
        }
    out.setdefault("timings", {})["total_s"] = round(time.perf_counter() - t0, 3)
    return out


def _fill(spec: dict[str, Any], out: wire.HarnessAnswer, t0: float) -> bool:
    """Fill `out` with the vLLM facts, the model and every wanted connector's run (started at
    `t0`); False where it stopped on a missing connector (the answer then has no timings)."""
    import vllm.config

    out["vllm"] = vllm_facts()
    registry = connector_registry()
    present = available_connectors(registry)
    out["available_connectors"] = sorted(present)
    wanted, missing = _wanted(spec["connectors"], present)
    if missing is not None:
        out["error"] = missing
        return False
    if spec.get("hotfix"):  # pd-doctor hotfix (issue 13): patch before any scheduler exists
        out["hotfix"] = hotfix.apply([present[k] for k in wanted])
    import_s = time.perf_counter() - t0
    out["prefix_match_unit_supported"] = "prefix_match_unit" in drive.field_names(vllm.config.CacheConfig)
    setup = Setup(spec)
    out["timings"] = {"import_s": round(import_s, 3), "config_s": round(setup.config_s, 3)}
    out["mamba_cache_modes_accepted"] = setup.accepted_modes
    out["model"] = setup.facts
    if not setup.facts["has_mamba_state"]:
        out["not_affected"] = {
            "reason": "this model has no Mamba state",
            "evidence": setup.facts,
        }
        return True
    if spec.get("triggers") == ["all"]:
        spec["triggers"] = list(triggers.TRIGGERS)
    out["results"] = [_run_one(setup, registry, key, present[key]) for key in wanted]
    return True


def _internals_error(exc: drive.InternalsError) -> wire.Error:
    """The answer's error for what stopped the harness (a ModelError: with vLLM's message and a hint)."""
    error: wire.Error = {
        "kind": getattr(exc, "kind", "internals"),
        "stage": exc.stage,
        "message": exc.message,
        "traceback": traceback.format_exc(),
    }
    if isinstance(exc, ModelError):
        error["hint"] = exc.hint
        error["vllm_message"] = exc.vllm_message
    return error


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spec", required=True, help="JSON run spec")
    parser.add_argument("--out", required=True, help="where to write the JSON answer")
    ns = parser.parse_args(argv)
    spec = json.loads(ns.spec)
    result = run(spec)
    try:
        import resource

        result.setdefault("timings", {})["peak_rss_mb"] = round(
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1
        )
    except ImportError:  # pragma: no cover - not on Linux
        pass
    tmp = ns.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(result, fh, default=str)
    os.replace(tmp, ns.out)
    return 0


if __name__ == "__main__":
    wire.exit_now(main())  # the answer is written: no interpreter teardown to wait for
