"""In-process repro of vLLM #53514 on the real vLLM scheduler.

Runs INSIDE the target vLLM interpreter, as `python -m <pkg>.harness --spec JSON --out FILE`.
Needs only the stdlib and the installed vLLM (and the torch it brings). For the user's model
config it asks vLLM for the model class and its Mamba state, sizes the KV cache blocks with the
platform's own code (`sizing.py`), builds vLLM's real `Scheduler` with the real KV connector
scheduler half and the real KV cache manager over vLLM's own KV cache groups, then runs the
trigger variants (`triggers.py`) and a control, and observes what happens. The answer is one
JSON document written to --out.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import importlib.util
import json
import os
import sys
import time
import traceback
from typing import Any, cast

from . import connectors, drive, hotfix, observe, platformrules, sizing, triggers, wire

SCHEMA_VERSION = wire.SCHEMA_VERSION
NUM_BLOCKS = 256
InternalsError = drive.InternalsError
construct = drive.construct


class ModelError(InternalsError):
    """vLLM could not build the ModelConfig because of the model class (see sizing.diagnose_model)."""

    def __init__(self, why: dict[str, str], vllm_message: str) -> None:
        super().__init__("build ModelConfig", why["message"])
        self.kind = why["kind"]
        self.hint = why.get("hint")
        self.vllm_message = vllm_message


class NotServable(InternalsError):
    """vLLM's own config rules refuse this model with this connector: no verdict to give."""

    kind = "not_servable"

    def __init__(self, message: str) -> None:
        super().__init__("group the KV cache", message)


def _conn(key: str) -> connectors.Connector:
    c = connectors.get(key)
    if c is None:
        raise InternalsError("find the connector", f"{key!r} is not in pd-doctor's registry")
    return c


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


def library_status(module: str) -> wire.TransferLibrary:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    return {"module": module, "installed": spec is not None, "needed_for_scheduler": False}


# --------------------------------------------------------------------------- config


def accepted_mamba_modes(CacheConfig: Any) -> list[str]:
    accepted = []
    for mode in ("align", "all"):
        try:
            CacheConfig(block_size=16, enable_prefix_caching=True, mamba_cache_mode=mode)
        except Exception:
            continue
        accepted.append(mode)
    return accepted


class Setup:
    """The model as vLLM sees it, and the configs each run needs (built by vLLM's code)."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        t0 = time.perf_counter()
        import torch  # noqa: F401 - vLLM needs it; imported here to time it apart
        from vllm import config as vcfg

        self.vcfg = vcfg
        self.import_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        self.model_dir = spec["model_dir"]
        with open(os.path.join(self.model_dir, "config.json"), encoding="utf-8") as fh:
            self.hf_config = json.load(fh)
        fields = drive.field_names(vcfg.CacheConfig)
        if "mamba_cache_mode" not in fields:
            raise InternalsError("build CacheConfig", "CacheConfig has no mamba_cache_mode field")
        self.accepted_modes = accepted_mamba_modes(vcfg.CacheConfig)
        self.has_prefix_match_unit = "prefix_match_unit" in fields
        if spec.get("prefix_match_unit") and not self.has_prefix_match_unit:
            raise InternalsError(
                "set the hash granularity", "this vLLM's CacheConfig has no prefix_match_unit"
            )
        self.platform = spec.get("platform") or sizing.native_platform()
        try:
            self.model_config = construct(
                "build ModelConfig",
                vcfg.ModelConfig,
                model=self.model_dir,
                tokenizer=self.model_dir,
                skip_tokenizer_init=True,
                dtype=spec.get("dtype") or "bfloat16",
                seed=0,
                max_model_len=spec.get("max_model_len"),
                trust_remote_code=False,
            )
        except InternalsError as exc:
            why = sizing.diagnose_model(self.hf_config)
            if why is None:
                raise
            raise ModelError(why, exc.message) from exc
        self.facts = sizing.model_facts(self.model_config)
        self.config_s = time.perf_counter() - t1
        self._built: dict[tuple[str, int], Any] = {}
        self._layers: dict[str, Any] | None = None
        self._layers_error: str | None = None
        self.layers_s: float | None = None

    def build(self, connector_name: str, budget: int) -> dict[str, Any]:
        """VllmConfig -> the platform's block sizing -> vLLM's KV cache groups."""
        key = (connector_name, budget)
        if key in self._built:
            return self._built[key]  # type: ignore[no-any-return]
        vcfg, spec = self.vcfg, self.spec
        cache_kwargs: dict[str, Any] = {"enable_prefix_caching": True, "gpu_memory_utilization": 0.5}
        if spec.get("block_size"):
            cache_kwargs["block_size"] = int(spec["block_size"])
        if spec.get("mamba_cache_mode"):
            cache_kwargs["mamba_cache_mode"] = spec["mamba_cache_mode"]
        if spec.get("prefix_match_unit"):
            cache_kwargs["prefix_match_unit"] = int(spec["prefix_match_unit"])
        cache_config = construct("build CacheConfig", vcfg.CacheConfig, **cache_kwargs)
        requested_mode = cache_config.mamba_cache_mode
        max_len = int(self.model_config.max_model_len)
        scheduler_config = construct(
            "build SchedulerConfig",
            vcfg.SchedulerConfig,
            max_num_seqs=8,
            max_num_batched_tokens=budget,
            max_model_len=max_len,
            enable_chunked_prefill=True,
            is_encoder_decoder=False,
            async_scheduling=False,
        )
        extra = next(
            (dict(c.hybrid_extra) for c in connectors.all_connectors() if connector_name in c.vllm_names), {}
        )
        kv_transfer_config = construct(
            "build KVTransferConfig",
            vcfg.KVTransferConfig,
            kv_connector=connector_name,
            kv_role=spec["kv_role"],
            kv_connector_extra_config=extra,
        )
        # VllmConfig runs the model's config hooks (mode rewrites, state dtypes) once per
        # ModelConfig object (its `config_updated` guard): give each build its own copy.
        with platformrules.config_rules(self.platform) as not_from_vllm:
            vllm_config = construct(
                "build VllmConfig",
                vcfg.VllmConfig,
                model_config=copy.deepcopy(self.model_config),
                cache_config=cache_config,
                scheduler_config=scheduler_config,
                kv_transfer_config=kv_transfer_config,
                device_config=construct("build DeviceConfig", vcfg.DeviceConfig, device="cpu"),
            )
        cache = vllm_config.cache_config
        try:
            align = sizing.align_block_size(vllm_config, self.platform, spec.get("block_size"))
            cls = sizing.model_class(vllm_config.model_config)
            shapes, dtypes = sizing.mamba_state(vllm_config, cls)
            specs, counts = self.layer_specs(vllm_config, cls)
            sizing.check_state_group(self.facts, counts)
            layout = sizing.resolve_layout(vllm_config, specs, self.platform)
            # max_model_len follows N (vLLM checks one request of it fits the KV cache).
            w = int(cache.block_size)
            n = int(spec.get("prompt_len") or (int(spec.get("blocks") or 1) * w + 1))
            used_len = min(max_len, n + w + 2)
            vllm_config.model_config.max_model_len = used_len
            vllm_config.scheduler_config.max_model_len = used_len
            kv, sched_bs, hash_bs = self.group(vllm_config, specs, connector_name)
        except sizing.SizingError as exc:
            err = InternalsError(exc.stage, exc.message)
            if exc.stage == "find the state layers":
                err.kind = "no_state_group"  # type: ignore[attr-defined]
            raise err from exc
        align["not_from_vllm"] = [*not_from_vllm, *align["not_from_vllm"]]
        if self._layers_error is not None:
            align["not_from_vllm"].append(f"KV cache specs: {counts['from']}")
        built = {
            "vllm_config": vllm_config,
            "kv_cache_config": kv,
            "scheduler_block_size": sched_bs,
            "hash_block_size": hash_bs,
            "sizing": {
                **align,
                "requested_block_size": spec.get("block_size"),
                "effective_block_size": int(cache.block_size),
                "scheduler_block_size": sched_bs,
                "hash_block_size": hash_bs,
                "prefix_match_unit": getattr(cache, "prefix_match_unit", None),
                "requested_mamba_cache_mode": spec.get("mamba_cache_mode"),
                "config_mamba_cache_mode": requested_mode,
                "mamba_cache_mode": cache.mamba_cache_mode,
                "max_model_len": used_len,
                "model_max_model_len": max_len,
                "layers": counts,
                "mamba_state": {
                    "shapes": [list(s) for s in shapes],
                    "dtypes": [str(d).replace("torch.", "") for d in dtypes],
                    "from": f"{cls.__qualname__}.get_mamba_state_shape_from_config"
                    " / get_mamba_state_dtype_from_config",
                },
                "kv_cache_groups": sizing.describe_groups(kv),
                "layers_build_s": self.layers_s,
                "kv_cache_layout": layout,
            },
        }
        self._built[key] = built
        return built

    def group(self, vllm_config: Any, specs: dict[str, Any], connector_name: str) -> tuple[Any, int, int]:
        """vLLM's KV cache grouping; where vLLM turned the hybrid KV cache manager off for this
        connector and then cannot group the model's state layers, vLLM itself would not start."""
        try:
            return sizing.kv_cache_config(vllm_config, specs, NUM_BLOCKS)
        except ValueError as exc:
            if getattr(vllm_config.scheduler_config, "disable_hybrid_kv_cache_manager", None):
                raise NotServable(
                    f"vLLM would not start this model with {connector_name}: the connector does not "
                    "support the hybrid KV cache manager (SupportsHMA) in this release, so vLLM turns "
                    f"it off, and then cannot group the model's state layers ({exc})"
                ) from exc
            raise

    def layer_specs(self, vllm_config: Any, cls: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        """Each layer's own KV cache spec (the model built once, on the meta device); where the
        model class cannot be built in this interpreter (a CUDA-only class on a CPU box), the
        specs from vLLM's config view, said so in `layers.from` and `not_from_vllm`."""
        if self._layers is None and self._layers_error is None:
            t0 = time.perf_counter()
            try:
                self._layers = sizing.build_layers(vllm_config, cls)
            except sizing.SizingError as exc:
                self._layers_error = exc.message
            self.layers_s = round(time.perf_counter() - t0, 3)
        if self._layers is not None:
            return sizing.layer_specs(vllm_config, self._layers, self.platform)
        return sizing.config_layer_specs(vllm_config, cls, self.platform, str(self._layers_error))

    def scheduler_factory(self, connector_name: str) -> Any:
        def build(budget: int) -> tuple[Any, Any]:
            b = self.build(connector_name, budget)
            return (
                build_scheduler(
                    b["vllm_config"], b["kv_cache_config"], b["scheduler_block_size"], b["hash_block_size"]
                ),
                drive.RequestFactory(b["vllm_config"], b["hash_block_size"]),
            )

        return build


def build_scheduler(vllm_config: Any, kv_cache_config: Any, block_size: int, hash_block_size: int) -> Any:
    sched_mod = importlib.import_module("vllm.v1.core.sched.scheduler")
    Scheduler = getattr(sched_mod, "Scheduler", None)
    if Scheduler is None:
        raise InternalsError("build Scheduler", "vllm.v1.core.sched.scheduler has no Scheduler")
    som = drive.import_first(
        "import StructuredOutputManager", [("vllm.v1.structured_output", "StructuredOutputManager")]
    )
    return construct(
        "build Scheduler",
        Scheduler,
        vllm_config=vllm_config,
        kv_cache_config=kv_cache_config,
        structured_output_manager=construct("build StructuredOutputManager", som, vllm_config=vllm_config),
        block_size=block_size,
        hash_block_size=hash_block_size,
        log_stats=False,
    )


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
    answer = _connector_answer(
        setup, key, vllm_name, sz, n, budget, runs, _control_answer(control, control_rec.events)
    )
    answer.update({"notes": notes, "elapsed_s": round(time.perf_counter() - t0, 3)})
    return answer


def _control_answer(control: dict[str, Any], events: list[wire.Event]) -> wire.ControlRun:
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


def _connector_answer(
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
    spec = setup.spec
    first = runs[0]
    lib = library_status(_conn(key).library)
    return {
        "connector": key,
        "connector_label": _conn(key).label,
        "kv_connector": vllm_name,
        "connector_class": first["connector_class"],
        "connector_scheduler_class": first["connector_scheduler_class"],
        "transfer_library": lib,
        "config": {
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
        },
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
        "triggers": [_trigger_entry(r) for r in runs],
        "control": control,
        "events": first["events"],
    }


def _trigger_entry(run: dict[str, Any]) -> wire.TriggerRun:
    """One trigger run as the answer lists it: no warm-up, wrapping or sizing detail."""
    entry = {k: v for k, v in run.items() if k not in ("warmup", "wrapped", "sizing")}
    entry["block_size"] = run["sizing"]["effective_block_size"]
    return cast(wire.TriggerRun, entry)  # triggers.run_variant builds it key by key


def _connector_error(key: str, vllm_name: str, stage: str, message: str) -> wire.ConnectorResult:
    return {
        "connector": key,
        "connector_label": _conn(key).label,
        "kv_connector": vllm_name,
        "error": {
            "kind": "internals",
            "stage": stage,
            "message": message,
            "traceback": traceback.format_exc(),
        },
    }


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
        answer = _connector_error(key, vllm_name, exc.stage, exc.message)
        answer["error"]["kind"] = getattr(exc, "kind", "internals")
        return answer
    except Exception as exc:
        return _connector_error(key, vllm_name, "run the connector", f"{type(exc).__name__}: {exc}")


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
        import vllm.v1.core.sched.scheduler
    except ImportError as exc:
        out["error"] = {"kind": "no_vllm", "stage": "import vllm", "message": f"{type(exc).__name__}: {exc}"}
        return out
    try:
        out["vllm"] = vllm_facts()
        registry = connector_registry()
        present = available_connectors(registry)
        out["available_connectors"] = sorted(present)
        wanted, missing = _wanted(spec["connectors"], present)
        if missing is not None:
            out["error"] = missing
            return out
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
            out["timings"]["total_s"] = round(time.perf_counter() - t0, 3)
            return out
        if spec.get("triggers") == ["all"]:
            spec["triggers"] = list(triggers.TRIGGERS)
        out["results"] = [_run_one(setup, registry, key, present[key]) for key in wanted]
    except InternalsError as exc:
        out["error"] = {
            "kind": getattr(exc, "kind", "internals"),
            "stage": exc.stage,
            "message": exc.message,
            "traceback": traceback.format_exc(),
        }
        if isinstance(exc, ModelError):
            out["error"]["hint"] = exc.hint
            out["error"]["vllm_message"] = exc.vllm_message
    except Exception as exc:
        out["error"] = {
            "kind": "internals",
            "stage": "run the harness",
            "message": f"{type(exc).__name__}: {exc}",
            "traceback": traceback.format_exc(),
        }
    out.setdefault("timings", {})["total_s"] = round(time.perf_counter() - t0, 3)
    return out


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
    sys.exit(main())
