"""In-process repro of vLLM #53514 on the real vLLM scheduler.

Runs INSIDE the target vLLM interpreter, as `python -m <pkg>.harness --spec JSON --out FILE`.
Needs only the stdlib and the installed vLLM (and the torch it brings). Builds vLLM's real
`Scheduler`, whose real KV connector scheduler half and real KV cache manager serve a hybrid
(full attention + Mamba) KV cache config with prefix caching on; warms the prefix cache through
the real scheduler; then adds the P-side trigger request and observes what happens.

Only the model step is fabricated (a sampled token per finished prefill). Everything else,
including the assertion if it fires, is vLLM's own code. vLLM internals drift between releases,
so every constructor is driven by feature detection (signatures and dataclass fields), never
by the version string. The answer is one JSON document written to --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import importlib
import importlib.util
import inspect
import json
import os
import sys
import time
import traceback
from typing import Any

if __package__:
    from . import connectors, hotfix, observe
else:  # pragma: no cover - run as a plain script
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import connectors  # type: ignore[no-redef]
    import hotfix  # type: ignore[no-redef]
    import observe  # type: ignore[no-redef]

SCHEMA_VERSION = 1



class InternalsError(Exception):
    """vLLM's internals could not be driven: which stage, what was found."""

    def __init__(self, stage: str, message: str) -> None:
        super().__init__(f"{stage}: {message}")
        self.stage = stage
        self.message = message


def _conn(key: str) -> connectors.Connector:
    c = connectors.get(key)
    if c is None:
        raise InternalsError("find the connector", f"{key!r} is not in pd-doctor's registry")
    return c


# --------------------------------------------------------------------------- helpers


def _accepts(fn: Any) -> set[str] | None:
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return None
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return None
    return set(params)


def construct(stage: str, cls: Any, **candidates: Any) -> Any:
    """Call `cls` with those candidate keyword arguments that it accepts."""
    accepted = _accepts(cls)
    kwargs = candidates if accepted is None else {k: v for k, v in candidates.items() if k in accepted}
    try:
        return cls(**kwargs)
    except Exception as exc:
        raise InternalsError(stage, f"{_qualname(cls)}({', '.join(kwargs)}) failed: "
                                    f"{type(exc).__name__}: {exc}") from exc


def _qualname(obj: Any) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', repr(obj))}"


def _import_first(stage: str, candidates: list[tuple[str, str]]) -> Any:
    errors = []
    for module, attr in candidates:
        try:
            return getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            errors.append(f"{module}.{attr} ({type(exc).__name__})")
    raise InternalsError(stage, "none of " + ", ".join(errors) + " could be imported")


def _field_names(cls: Any) -> set[str]:
    if dataclasses.is_dataclass(cls):
        return {f.name for f in dataclasses.fields(cls)}
    return set(_accepts(cls) or ())


# --------------------------------------------------------------------------- vLLM facts


def vllm_facts() -> dict[str, Any]:
    import vllm

    return {
        "version": str(getattr(vllm, "__version__", "unknown")),
        "path": os.path.dirname(os.path.abspath(vllm.__file__)),
    }


def connector_registry() -> dict[str, Any]:
    factory = _import_first(
        "import KVConnectorFactory",
        [("vllm.distributed.kv_transfer.kv_connector.factory", "KVConnectorFactory")],
    )
    registry = getattr(factory, "_registry", None)
    if not isinstance(registry, dict):
        raise InternalsError("read the KV connector registry",
                             "KVConnectorFactory has no _registry dict")
    return registry


def available_connectors(registry: dict[str, Any]) -> dict[str, str]:
    found = {}
    for c in connectors.all_connectors():
        for name in c.vllm_names:
            if name in registry:
                found[c.key] = name
                break
    return found


def library_status(module: str) -> dict[str, Any]:
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):
        spec = None
    return {"module": module, "installed": spec is not None}


# --------------------------------------------------------------------------- config


def read_model_layers(model_dir: str) -> tuple[list[str], dict[str, Any]]:
    with open(os.path.join(model_dir, "config.json"), encoding="utf-8") as fh:
        cfg = json.load(fh)
    layer_types = cfg.get("layer_types") or cfg.get("layers_block_type")
    if not isinstance(layer_types, list) or not layer_types:
        raise InternalsError("read the model config",
                             f"{model_dir}/config.json has no layer_types list")
    return [str(t) for t in layer_types], cfg


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
    """The vLLM config pieces shared by every connector's run."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = spec
        t0 = time.perf_counter()
        import torch  # noqa: F401 - vLLM needs it; imported here to time it apart
        from vllm import config as vcfg

        self.vcfg = vcfg
        self.import_s = time.perf_counter() - t0
        t1 = time.perf_counter()
        self.model_dir = spec["model_dir"]
        self.layer_types, self.hf_config = read_model_layers(self.model_dir)
        CacheConfig = vcfg.CacheConfig
        if "mamba_cache_mode" not in _field_names(CacheConfig):
            raise InternalsError("build CacheConfig",
                                 "CacheConfig has no mamba_cache_mode field")
        self.accepted_modes = accepted_mamba_modes(CacheConfig)
        mode = spec.get("mamba_cache_mode")
        if mode is None:
            if not self.accepted_modes:
                raise InternalsError("choose mamba_cache_mode",
                                     "CacheConfig accepts neither 'align' nor 'all' with "
                                     "prefix caching")
            mode = self.accepted_modes[0]
        self.mamba_cache_mode = mode
        self.model_config = construct(
            "build ModelConfig", vcfg.ModelConfig,
            model=self.model_dir, tokenizer=self.model_dir, skip_tokenizer_init=True,
            dtype="bfloat16", seed=0, max_model_len=int(spec["max_model_len"]),
            trust_remote_code=False,
        )
        self.config_s = time.perf_counter() - t1

    def vllm_config(self, connector_name: str) -> Any:
        vcfg = self.vcfg
        spec = self.spec
        cache_config = construct(
            "build CacheConfig", vcfg.CacheConfig,
            block_size=int(spec["block_size"]), enable_prefix_caching=True,
            mamba_cache_mode=self.mamba_cache_mode, gpu_memory_utilization=0.5,
        )
        max_len = int(spec["max_model_len"])
        scheduler_config = construct(
            "build SchedulerConfig", vcfg.SchedulerConfig,
            max_num_seqs=8, max_num_batched_tokens=max(2048, max_len), max_model_len=max_len,
            enable_chunked_prefill=True, is_encoder_decoder=False,
            async_scheduling=False,
        )
        kv_transfer_config = construct(
            "build KVTransferConfig", vcfg.KVTransferConfig,
            kv_connector=connector_name, kv_role=spec["kv_role"],
        )
        return construct(
            "build VllmConfig", vcfg.VllmConfig,
            model_config=self.model_config, cache_config=cache_config,
            scheduler_config=scheduler_config, kv_transfer_config=kv_transfer_config,
            device_config=construct("build DeviceConfig", vcfg.DeviceConfig, device="cpu"),
        )


def build_kv_cache_config(setup: Setup, vllm_config: Any, num_blocks: int) -> Any:
    import torch

    iface = importlib.import_module("vllm.v1.kv_cache_interface")
    for name in ("FullAttentionSpec", "MambaSpec", "KVCacheGroupSpec", "KVCacheConfig"):
        if not hasattr(iface, name):
            raise InternalsError("build the KV cache config",
                                 f"vllm.v1.kv_cache_interface has no {name}")
    block_size = vllm_config.cache_config.block_size
    cfg = setup.hf_config
    n_heads = int(cfg.get("num_attention_heads", 2))
    head_size = int(cfg.get("hidden_size", 128)) // n_heads
    kv_heads = int(cfg.get("num_key_value_heads", n_heads))
    m_heads = int(cfg.get("mamba_n_heads", 8))
    m_dhead = int(cfg.get("mamba_d_head", 32))
    d_state = int(cfg.get("mamba_d_state", 16))
    groups = int(cfg.get("mamba_n_groups", 1))
    d_conv = int(cfg.get("mamba_d_conv", 4))
    conv_dim = m_heads * m_dhead + 2 * groups * d_state

    attn_layers = [f"model.layers.{i}.self_attn.attn" for i, t in enumerate(setup.layer_types)
                   if t == "attention"]
    mamba_layers = [f"model.layers.{i}.mamba" for i, t in enumerate(setup.layer_types)
                    if t != "attention"]
    if not attn_layers or not mamba_layers:
        raise InternalsError("build the KV cache config",
                             "the model config is not hybrid (needs attention and mamba layers)")
    attn_spec = construct(
        "build FullAttentionSpec", iface.FullAttentionSpec,
        block_size=block_size, num_kv_heads=kv_heads, head_size=head_size, dtype=torch.bfloat16,
    )
    mamba_spec = construct(
        "build MambaSpec", iface.MambaSpec,
        block_size=block_size,
        shapes=((d_conv - 1, conv_dim), (m_heads, m_dhead, d_state)),
        dtypes=(torch.bfloat16, torch.float32),
        mamba_cache_mode=setup.mamba_cache_mode,
        num_speculative_blocks=0,
    )
    groups_list = [
        construct("build KVCacheGroupSpec", iface.KVCacheGroupSpec,
                  layer_names=attn_layers, kv_cache_spec=attn_spec),
        construct("build KVCacheGroupSpec", iface.KVCacheGroupSpec,
                  layer_names=mamba_layers, kv_cache_spec=mamba_spec),
    ]
    vllm_config.cache_config.num_gpu_blocks = num_blocks
    return construct(
        "build KVCacheConfig", iface.KVCacheConfig,
        num_blocks=num_blocks, kv_cache_tensors=[], kv_cache_groups=groups_list,
    )


def build_scheduler(vllm_config: Any, kv_cache_config: Any) -> Any:
    sched_mod = importlib.import_module("vllm.v1.core.sched.scheduler")
    Scheduler = getattr(sched_mod, "Scheduler", None)
    if Scheduler is None:
        raise InternalsError("build Scheduler", "vllm.v1.core.sched.scheduler has no Scheduler")
    som = _import_first("import StructuredOutputManager",
                        [("vllm.v1.structured_output", "StructuredOutputManager")])
    block_size = vllm_config.cache_config.block_size
    return construct(
        "build Scheduler", Scheduler,
        vllm_config=vllm_config, kv_cache_config=kv_cache_config,
        structured_output_manager=construct("build StructuredOutputManager", som,
                                            vllm_config=vllm_config),
        block_size=block_size, hash_block_size=block_size, log_stats=False,
    )


# --------------------------------------------------------------------------- requests


class RequestFactory:
    def __init__(self, vllm_config: Any) -> None:
        from vllm import SamplingParams

        self.SamplingParams = SamplingParams
        self.Request = _import_first("import Request", [("vllm.v1.request", "Request")])
        kcu = importlib.import_module("vllm.v1.core.kv_cache_utils")
        hashing = None
        for mod in ("vllm.utils.hashing", "vllm.utils"):
            try:
                hashing = importlib.import_module(mod)
            except ImportError:
                continue
            if hasattr(hashing, "get_hash_fn_by_name"):
                break
        if hashing is None or not hasattr(hashing, "get_hash_fn_by_name"):
            raise InternalsError("choose the prefix-cache hash", "get_hash_fn_by_name not found")
        algo = getattr(vllm_config.cache_config, "prefix_caching_hash_algo", "sha256")
        hash_fn = hashing.get_hash_fn_by_name(algo)
        kcu.init_none_hash(hash_fn)
        self.block_hasher = kcu.get_request_block_hasher(vllm_config.cache_config.block_size,
                                                         hash_fn)

    def make(self, request_id: str, prompt: list[int], kv_transfer_params: dict[str, Any]) -> Any:
        sp = construct("build SamplingParams", self.SamplingParams, max_tokens=1,
                       extra_args={"kv_transfer_params": kv_transfer_params})
        if hasattr(sp, "update_from_generation_config"):
            sp.update_from_generation_config({}, 2)
        req = construct(
            "build Request", self.Request,
            request_id=request_id, prompt_token_ids=list(prompt), sampling_params=sp,
            pooling_params=None, block_hasher=self.block_hasher, mm_features=None,
            eos_token_id=2, arrival_time=time.time(),
        )
        # Requests read kv_transfer_params from sampling_params.extra_args; older releases
        # set it from outside: make sure it is there, as the engine would.
        if getattr(req, "kv_transfer_params", None) is None:
            req.kv_transfer_params = kv_transfer_params
        return req


def fabricate_model_output(scheduler: Any, sched_out: Any, token: int) -> Any:
    """A ModelRunnerOutput with one sampled token for every request whose prefill is done."""
    outputs = importlib.import_module("vllm.v1.outputs")
    MRO = outputs.ModelRunnerOutput
    num_sched: dict[str, int] = dict(getattr(sched_out, "num_scheduled_tokens", {}) or {})
    req_ids = list(num_sched)
    sampled = []
    for rid in req_ids:
        req = scheduler.requests.get(rid)
        done = req is not None and req.num_computed_tokens >= req.num_tokens
        sampled.append([token] if done else [])
    candidates: dict[str, Any] = {
        "req_ids": req_ids,
        "req_id_to_index": {r: i for i, r in enumerate(req_ids)},
        "sampled_token_ids": sampled,
        "logprobs": None,
        "prompt_logprobs_dict": {},
        "pooler_output": None,
        "spec_token_ids": None,
        "kv_connector_output": None,
    }
    if dataclasses.is_dataclass(MRO):
        required = [f.name for f in dataclasses.fields(MRO)
                    if f.default is dataclasses.MISSING
                    and f.default_factory is dataclasses.MISSING  # type: ignore[misc]
                    and f.init]
        missing = [n for n in required if n not in candidates]
        if missing:
            raise InternalsError("fabricate the model step",
                                 f"ModelRunnerOutput needs unknown fields {missing}")
    return construct("fabricate the model step", MRO, **candidates)


def run_request(scheduler: Any, rec: observe.Recorder, request: Any,
                max_steps: int = 32) -> dict[str, Any]:
    """Add a request and step the real scheduler until it finishes (or an exception)."""
    rid = str(request.request_id)
    len_before = len(request.prompt_token_ids)
    observe.watch_prompt(rec, request)
    rec.emit("add_request", request_id=rid, num_tokens=len_before)
    scheduler.add_request(request)
    scheduled_total = 0
    scheduled_steps = []
    for _step in range(max_steps):
        rec.emit("schedule", request_id=rid, num_tokens=request.num_tokens)
        sched_out = scheduler.schedule()
        n = int((getattr(sched_out, "num_scheduled_tokens", {}) or {}).get(rid, 0))
        rec.emit("scheduled", request_id=rid, scheduled_tokens=n,
                 num_computed_tokens=request.num_computed_tokens)
        scheduled_total += n
        if n:
            scheduled_steps.append(n)
        mro = fabricate_model_output(scheduler, sched_out, token=7)
        scheduler.update_from_output(sched_out, mro)
        finished = rid not in scheduler.requests or request.is_finished()
        if finished:
            rec.emit("finished", request_id=rid, status=str(getattr(request, "status", "")))
            break
    else:
        raise InternalsError("step the scheduler",
                             f"request {rid} did not finish in {max_steps} steps")
    return {
        "len_before": len_before,
        "len_after": len(request.prompt_token_ids),
        "scheduled_tokens": scheduled_total,
        "scheduled_steps": scheduled_steps,
    }


def run_scenario(setup: Setup, connector_name: str, prompt_len: int, phase_prefix: str,
                 rec: observe.Recorder) -> dict[str, Any]:
    """Warm the prefix cache with a prompt, then send the same prompt again (the trigger)."""
    vllm_config = setup.vllm_config(connector_name)
    kv_cache_config = build_kv_cache_config(setup, vllm_config, num_blocks=512)
    rec.phase = f"{phase_prefix}setup"
    scheduler = build_scheduler(vllm_config, kv_cache_config)
    connector = getattr(scheduler, "connector", None)
    if connector is None:
        raise InternalsError("build Scheduler",
                             f"the scheduler created no KV connector for {connector_name}")
    wrapped_hooks = observe.wrap_connector(rec, connector)
    wrapped_lookups = observe.wrap_lookups(rec, scheduler.kv_cache_manager)
    if not wrapped_lookups:
        raise InternalsError("watch the prefix-cache lookup",
                             "the KV cache manager has none of " + ", ".join(observe.LOOKUP_METHODS))
    factory = RequestFactory(vllm_config)
    # Deterministic prompt; token ids stay inside the tiny vocabulary.
    vocab = int(setup.hf_config.get("vocab_size", 512))
    prompt = [3 + (i * 7) % (vocab - 3) for i in range(prompt_len)]

    rec.phase = f"{phase_prefix}warmup"
    warm = factory.make(f"{phase_prefix}warmup", prompt, {"do_remote_decode": True})
    warm_res = run_request(scheduler, rec, warm)

    rec.phase = f"{phase_prefix}trigger"
    trig = factory.make(f"{phase_prefix}trigger", prompt, {"do_remote_decode": True})
    assertion: dict[str, Any] = {"fired": False, "location": None, "statement": None,
                                 "message": None, "traceback": None}
    trig_res: dict[str, Any] = {}
    try:
        trig_res = run_request(scheduler, rec, trig)
    except AssertionError as exc:
        loc = observe.exception_location(exc)
        statement = (loc or {}).get("code", "")
        rec.emit("assertion", request_id=str(trig.request_id),
                 location=f"{loc['file']}:{loc['line']}" if loc else None, statement=statement)
        assertion = {
            "fired": True,
            "matches_53514": "num_new_tokens" in statement and "> 0" in statement,
            "location": f"{loc['file']}:{loc['line']}" if loc else None,
            "function": (loc or {}).get("function"),
            "statement": statement,
            "message": str(exc) or None,
            "traceback": observe.format_exception(exc),
        }
        trig_res = {"len_before": prompt_len, "len_after": len(trig.prompt_token_ids),
                    "scheduled_tokens": 0, "scheduled_steps": []}
    truncation = observe.summarize(rec, str(trig.request_id))
    return {
        "prompt_len": prompt_len,
        "warmup": {**warm_res, "truncation": observe.summarize(rec, str(warm.request_id))},
        "assertion": assertion,
        "truncation": truncation,
        "prompt": {"len_before": trig_res["len_before"], "len_after": trig_res["len_after"]},
        "prefix_cache": {"hit_tokens": truncation["hit_tokens"],
                         "lookups": truncation["lookups"]},
        "scheduled_tokens": trig_res["scheduled_tokens"],
        "wrapped": {"connector_hooks": wrapped_hooks, "lookups": wrapped_lookups},
        "connector_class": _qualname(type(connector)),
        "connector_scheduler_class": _qualname(type(getattr(connector, "connector_scheduler",
                                                            None) or connector)),
        "block_size": vllm_config.cache_config.block_size,
    }


def run_connector(setup: Setup, key: str, vllm_name: str) -> dict[str, Any]:
    spec = setup.spec
    rec = observe.Recorder()
    t0 = time.perf_counter()
    block = int(spec["block_size"])
    prompt_len = int(spec.get("prompt_len") or (2 * block + 1))
    trigger = run_scenario(setup, vllm_name, prompt_len, "", rec)
    # The control: one token more, so the cached prefix is N-2 of the prompt, not N-1.
    control_rec = observe.Recorder()
    control = run_scenario(setup, vllm_name, prompt_len + 1, "control-", control_rec)
    lib = library_status(_conn(key).library)
    return {
        "connector": key,
        "connector_label": _conn(key).label,
        "kv_connector": vllm_name,
        "connector_class": trigger["connector_class"],
        "connector_scheduler_class": trigger["connector_scheduler_class"],
        "transfer_library": {**lib, "needed_for_scheduler": False},
        "config": {
            "block_size": trigger["block_size"],
            "prompt_len": prompt_len,
            "mamba_cache_mode": setup.mamba_cache_mode,
            "kv_role": spec["kv_role"],
            "model_dir": setup.model_dir,
        },
        "assertion": trigger["assertion"],
        "truncation": trigger["truncation"],
        "prefix_cache": trigger["prefix_cache"],
        "prompt": trigger["prompt"],
        "scheduled_tokens": trigger["scheduled_tokens"],
        "warmup": trigger["warmup"],
        "wrapped": trigger["wrapped"],
        "control": {
            "prompt_len": control["prompt_len"],
            "assertion_fired": control["assertion"]["fired"],
            "assertion_location": control["assertion"]["location"],
            "hit_tokens": control["prefix_cache"]["hit_tokens"],
            "scheduled_tokens": control["scheduled_tokens"],
            "truncation_hook": control["truncation"]["hook"],
            "prompt": control["prompt"],
            "events": control_rec.events,
        },
        "events": rec.events,
        "elapsed_s": round(time.perf_counter() - t0, 3),
    }


def _connector_error(key: str, vllm_name: str, stage: str, message: str) -> dict[str, Any]:
    return {
        "connector": key,
        "connector_label": _conn(key).label,
        "kv_connector": vllm_name,
        "error": {"kind": "internals", "stage": stage, "message": message,
                  "traceback": traceback.format_exc()},
    }


def check_importable(registry: dict[str, Any], vllm_name: str) -> None:
    """Load the connector's class the way the factory would; say what is missing if not."""
    loader = registry.get(vllm_name)
    try:
        if callable(loader):
            loader()
    except ImportError as exc:
        missing = getattr(exc, "name", None)
        detail = f"it needs the Python module {missing!r}, not installed here" if missing \
            else f"{type(exc).__name__}: {exc}"
        raise InternalsError("import the connector", f"{vllm_name} cannot be loaded: {detail}") \
            from exc


def run(spec: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "engine": "inprocess",
                           "python": observe.python_info(), "spec": spec}
    t0 = time.perf_counter()
    try:
        import vllm
        import vllm.config
        import vllm.v1.core.sched.scheduler  # noqa: F401
    except ImportError as exc:
        out["error"] = {"kind": "no_vllm", "stage": "import vllm",
                        "message": f"{type(exc).__name__}: {exc}"}
        return out
    try:
        out["vllm"] = vllm_facts()
        registry = connector_registry()
        present = available_connectors(registry)
        out["available_connectors"] = sorted(present)
        wanted = spec["connectors"]
        if wanted == ["all"]:
            wanted = [k for k in connectors.connector_keys() if k in present]
        missing = [k for k in wanted if k not in present]
        if missing:
            out["error"] = {
                "kind": "connector_missing",
                "stage": "find the connector",
                "message": f"this vLLM has no {', '.join(missing)} connector "
                           f"(it has: {', '.join(sorted(present)) or 'none'})",
            }
            return out
        if spec.get("hotfix"):  # pd-doctor hotfix (issue 13): patch before any scheduler exists
            out["hotfix"] = hotfix.apply([present[k] for k in wanted])
        import_s = time.perf_counter() - t0
        setup = Setup(spec)
        out["timings"] = {"import_s": round(import_s, 3),
                          "config_s": round(setup.config_s, 3)}
        out["mamba_cache_modes_accepted"] = setup.accepted_modes
        results = []
        for key in wanted:
            try:
                check_importable(registry, present[key])
                results.append(run_connector(setup, key, present[key]))
            except InternalsError as exc:
                results.append(_connector_error(key, present[key], exc.stage, exc.message))
            except Exception as exc:
                results.append(_connector_error(key, present[key], "run the connector",
                                                f"{type(exc).__name__}: {exc}"))
        out["results"] = results
    except InternalsError as exc:
        out["error"] = {"kind": "internals", "stage": exc.stage, "message": exc.message,
                        "traceback": traceback.format_exc()}
    except Exception as exc:
        out["error"] = {"kind": "internals", "stage": "run the harness",
                        "message": f"{type(exc).__name__}: {exc}",
                        "traceback": traceback.format_exc()}
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
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)
    except ImportError:  # pragma: no cover - not on Linux
        pass
    tmp = ns.out + ".tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(result, fh, default=str)
    os.replace(tmp, ns.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
