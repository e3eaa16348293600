"""The model and the KV cache sizes a real engine would use, computed by the installed vLLM.

Runs INSIDE the target vLLM interpreter (stdlib + vllm only). Nothing here re-derives vLLM's
rules: the model class comes from vLLM's ModelRegistry, the Mamba state from the class's own
`get_mamba_state_shape_from_config` / `get_mamba_state_dtype_from_config`, the block size from
the platform's own `update_block_size_for_backend` (which runs `_align_hybrid_block_size` or
whatever the release calls it), the layers and their KV cache specs from the model itself (built
by vLLM on the meta device, each layer's own `get_kv_cache_spec`, as the model runner collects
them), the KV cache groups from `get_kv_cache_configs`, and the hash
granularity from `resolve_kv_cache_block_sizes`. Every call is feature-detected.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from . import platformrules
from .drive import construct

FINDERS = ("_find_non_ssm_backends", "_find_non_ssm_backend")


class SizingError(Exception):
    def __init__(self, stage: str, message: str) -> None:
        super().__init__(f"{stage}: {message}")
        self.stage = stage
        self.message = message


def model_class(model_config: Any) -> Any:
    from vllm.model_executor.models import ModelRegistry

    try:
        cls, _arch = ModelRegistry.resolve_model_cls(model_config.architecture, model_config=model_config)
    except TypeError:  # older signature
        cls, _arch = ModelRegistry.resolve_model_cls(model_config.architectures)
    return cls


def _flag(obj: Any, name: str) -> Any:
    try:
        value = getattr(obj, name)
    except Exception:
        return None
    return value if isinstance(value, bool) else None


def model_facts(model_config: Any) -> dict[str, Any]:
    """What vLLM itself says about the model: class, hybrid/Mamba flags."""
    cls = model_class(model_config)
    has_state = callable(getattr(cls, "get_mamba_state_shape_from_config", None))
    return {
        "architecture": str(model_config.architecture),
        "model_class": f"{cls.__module__}.{cls.__qualname__}",
        "is_hybrid": _flag(model_config, "is_hybrid"),
        "is_attention_free": _flag(model_config, "is_attention_free"),
        "has_inner_state": _flag(model_config, "has_inner_state"),
        "supports_mamba_prefix_caching": _flag(model_config, "supports_mamba_prefix_caching"),
        "has_mamba_state_classmethods": has_state,
        "has_mamba_state": bool(
            has_state and (_flag(model_config, "is_hybrid") or _flag(model_config, "is_attention_free"))
        ),
    }


def mamba_state(vllm_config: Any, cls: Any) -> tuple[Any, Any]:
    if not hasattr(cls, "get_mamba_state_shape_from_config"):  # a dense model (repro --scenario)
        return (), ()
    shapes = cls.get_mamba_state_shape_from_config(vllm_config)
    dtypes = cls.get_mamba_state_dtype_from_config(vllm_config)
    return tuple(tuple(int(d) for d in s) for s in shapes), tuple(dtypes)


def _use_mla(vllm_config: Any) -> bool:
    return bool(getattr(vllm_config.model_config, "use_mla", False))


def native_platform() -> str:
    """The platform a run judges by default (see platformrules.default)."""
    return platformrules.default()


def align_block_size(vllm_config: Any, platform: str, requested: int | None) -> dict[str, Any]:
    """Run the platform's own block sizing on `vllm_config` (in place); say what it did."""
    from vllm.config import CacheConfig

    cache = vllm_config.cache_config
    before = int(cache.block_size)
    if platform != platformrules.running() and requested is None:
        # VllmConfig ran this interpreter's platform defaults; start from the target's.
        cache.block_size = int(getattr(CacheConfig, "DEFAULT_BLOCK_SIZE", 16))
    start = int(cache.block_size)
    try:
        pcls, not_from_vllm = platformrules.platform_class(platform)
        backend, backend_name = platformrules.backend(platform, _use_mla(vllm_config))
    except platformrules.PlatformError as exc:
        raise SizingError(exc.stage, exc.message) from exc
    if platform != platformrules.running():
        not_from_vllm = [
            *not_from_vllm,
            f"attention backend: {backend_name} assumed (CudaPlatform picks it by the GPU's capability)",
        ]
    finder = next((n for n in FINDERS if hasattr(pcls, n)), None)
    if finder is None or not hasattr(pcls, "update_block_size_for_backend"):
        raise SizingError(
            "size the KV cache blocks", "the platform has no update_block_size_for_backend / backend finder"
        )
    found: Any = [backend] if finder.endswith("s") else backend
    sized: Any = type("PdDoctorPlatform", (pcls,), {finder: classmethod(lambda cls, _vc: found)})
    sized.update_block_size_for_backend(vllm_config)
    return {
        "platform": platform,
        "platform_class": f"{pcls.__module__}.{pcls.__qualname__}",
        "attention_backend": f"{backend.__module__}.{backend.__qualname__}",
        "config_default_block_size": before,
        "before_alignment": start,
        "after_alignment": int(cache.block_size),
        "mamba_block_size": getattr(cache, "mamba_block_size", None),
        "mamba_page_size_padded": getattr(cache, "mamba_page_size_padded", None),
        "call": f"{pcls.__qualname__}.update_block_size_for_backend",
        "not_from_vllm": not_from_vllm,
    }


def _ensure_distributed(vllm_config: Any) -> None:
    """A one-rank gloo group: vLLM's parallel layers ask for their TP rank when built."""
    import socket

    from vllm.config import set_current_vllm_config

    ps = importlib.import_module("vllm.distributed.parallel_state")
    if ps.model_parallel_is_initialized():
        return
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    with set_current_vllm_config(vllm_config):
        construct(
            "start a one-rank process group",
            ps.init_distributed_environment,
            world_size=1,
            rank=0,
            distributed_init_method=f"tcp://127.0.0.1:{port}",
            local_rank=0,
            backend="gloo",
        )
        ps.ensure_model_parallel_initialized(1, 1)


def build_layers(vllm_config: Any, cls: Any) -> dict[str, Any]:
    """The model's attention and state layers, built by vLLM on the meta device (no weights).

    This is how vLLM's model runners find the layers: the model registers each one in the
    config's static forward context while it is built.
    """
    import torch
    from vllm.config import set_current_vllm_config

    _ensure_distributed(vllm_config)
    try:
        with set_current_vllm_config(vllm_config), torch.device("meta"):
            cls(vllm_config=vllm_config, prefix="")
    except Exception as exc:
        raise SizingError(
            "build the model's layers on the meta device", f"{cls.__qualname__}: {type(exc).__name__}: {exc}"
        ) from exc
    ctx = getattr(vllm_config.compilation_config, "static_forward_context", None) or {}
    return {name: layer for name, layer in ctx.items() if callable(getattr(layer, "get_kv_cache_spec", None))}


def _customizer() -> Any:
    utils = None
    try:
        utils = importlib.import_module("vllm.v1.worker.utils")
    except Exception:
        pass
    custom = getattr(utils, "customize_attention_spec", None)
    if callable(custom):
        return custom

    def by_backend(backend: Any, spec: Any) -> Any:  # releases before customize_spec keep the spec
        own = getattr(backend, "customize_spec", None)
        return own(spec) if callable(own) else spec

    return by_backend


def layer_specs(
    vllm_config: Any, layers: dict[str, Any], platform: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Each layer's own `get_kv_cache_spec` for this config, as vLLM's model runner collects them.

    On the target's own platform an attention spec is customised by the layer's own backend;
    for another platform (a CUDA deployment judged from a CPU box) a plain full-attention spec is
    customised by that platform's backend, other attention specs are kept as the layer gives them.
    """
    iface = importlib.import_module("vllm.v1.kv_cache_interface")
    custom = _customizer()
    native = platform == platformrules.running()
    mla_spec = getattr(iface, "MLAAttentionSpec", None)
    specs: dict[str, Any] = {}
    kept: set[str] = set()
    for name, layer in layers.items():
        if getattr(layer, "kv_sharing_target_layer_name", None):
            continue
        spec = layer.get_kv_cache_spec(vllm_config)
        if spec is None:
            continue
        if isinstance(spec, iface.AttentionSpec):
            if native and hasattr(layer, "get_attn_backend"):
                spec = custom(layer.get_attn_backend(), spec)
            elif type(spec) is iface.FullAttentionSpec or (mla_spec is not None and type(spec) is mla_spec):
                spec = custom(
                    platformrules.backend(platform, type(spec) is not iface.FullAttentionSpec)[0], spec
                )
            else:
                kept.add(type(spec).__name__)
        specs[name] = spec
    kinds: dict[str, int] = {}
    for spec in specs.values():
        kinds[type(spec).__name__] = kinds.get(type(spec).__name__, 0) + 1
    state = sum(isinstance(s, iface.MambaSpec) for s in specs.values())
    return specs, {
        "total": len(layers),
        "attention": sum(isinstance(s, iface.AttentionSpec) for s in specs.values()),
        "mamba": state,
        "from": "each layer's get_kv_cache_spec (model built on the meta device)",
        "kinds": kinds,
        "specs_not_customised_for_platform": sorted(kept),
    }


ATTENTION_KINDS = ("full_attention", "attention", "sliding_attention", "hybrid")
NO_STATE_KINDS = ("full_attention", "attention", "sliding_attention", "mlp", "moe", "")


def _config_kinds(vllm_config: Any, total: int) -> tuple[int, int, str]:
    """(attention, state) layer counts from vLLM's own view of the config, and where from."""
    mc, pc = vllm_config.model_config, vllm_config.parallel_config
    text = getattr(mc, "hf_text_config", None)
    types = getattr(text, "layer_types", None)
    if isinstance(types, (list, tuple)) and types:
        kinds = [str(t) for t in types]
        attn = sum(k in ATTENTION_KINDS for k in kinds)
        return attn, sum(k not in NO_STATE_KINDS for k in kinds), "hf_text_config.layer_types"
    for name in sorted(dir(text)):
        if not (name.startswith("is_") and name.endswith("_layer")) or "attn" in name or "attention" in name:
            continue
        pred = getattr(text, name, None)
        try:
            state = sum(bool(pred(i)) for i in range(total)) if callable(pred) else 0
        except Exception:
            continue
        if state:
            return total - state, state, f"hf_text_config.{name}"
    attn = int(mc.get_num_layers_by_block_type(pc, "attention"))
    return attn, total - attn, "ModelConfig.get_num_layers_by_block_type"


def config_layer_specs(
    vllm_config: Any, cls: Any, platform: str, why: str
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Where vLLM's model cannot be built here: the specs from vLLM's config view and the class."""
    iface = importlib.import_module("vllm.v1.kv_cache_interface")
    from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE

    mc, cache, pc = vllm_config.model_config, vllm_config.cache_config, vllm_config.parallel_config
    total = int(mc.get_num_layers(pc))
    attn_n, state_n, source = _config_kinds(vllm_config, total)
    kv_dtype = mc.dtype if cache.cache_dtype == "auto" else STR_DTYPE_TO_TORCH_DTYPE[cache.cache_dtype]
    use_mla = _use_mla(vllm_config)
    spec_cls = getattr(iface, "MLAAttentionSpec", None) if use_mla else iface.FullAttentionSpec
    attn = construct(
        "build the attention spec",
        spec_cls or iface.FullAttentionSpec,
        block_size=int(cache.block_size),
        num_kv_heads=mc.get_num_kv_heads(pc),
        head_size=mc.get_head_size(),
        dtype=kv_dtype,
        cache_dtype_str=cache.cache_dtype,
    )
    attn = _customizer()(platformrules.backend(platform, use_mla)[0], attn)
    shapes, dtypes = mamba_state(vllm_config, cls)
    state = construct(
        "build the state spec",
        iface.MambaSpec,
        shapes=shapes,
        dtypes=dtypes,
        block_size=int(cache.mamba_block_size or cache.block_size),
        page_size_padded=getattr(cache, "mamba_page_size_padded", None),
        mamba_cache_mode=cache.mamba_cache_mode,
        num_speculative_blocks=0,
    )
    specs = {f"model.layers.{i}.attn": attn for i in range(attn_n)}
    specs.update({f"model.layers.{attn_n + i}.state": state for i in range(state_n)})
    return specs, {
        "total": total,
        "attention": attn_n,
        "mamba": state_n,
        "from": f"{source} + {cls.__qualname__}'s Mamba state (the model could not be built here: {why})",
        "kinds": {type(attn).__name__: attn_n, "MambaSpec": state_n},
        "specs_not_customised_for_platform": [],
    }


def check_state_group(facts: dict[str, Any], layers: dict[str, Any]) -> None:
    """A class with a Mamba state must give the KV cache a state layer; anything else is ours to fix."""
    if facts.get("has_mamba_state") and not layers.get("mamba"):
        raise SizingError(
            "find the state layers",
            f"{facts.get('model_class')} has a Mamba state but none of its layers gives a "
            f"MambaSpec (layers: {layers.get('kinds')}); the KV cache would have no state group",
        )


def resolve_layout(vllm_config: Any, specs: dict[str, Any], platform: str) -> str | None:
    """Where the release resolves one KV cache layout in the engine core, do it the same way."""
    utils = importlib.import_module("vllm.v1.attention.backends.utils")
    resolve = getattr(utils, "resolve_kv_cache_layout", None)
    supported = getattr(utils, "get_supported_kv_cache_layouts", None)
    if resolve is None or supported is None:
        return None
    names = [layout.name for layout in supported([platformrules.backend(platform, _use_mla(vllm_config))[0]])]
    layout = resolve(vllm_config, [names], list(specs.values()))
    return str(getattr(layout, "name", layout))


def kv_cache_config(
    vllm_config: Any,
    specs: dict[str, Any],
    num_blocks: int,
) -> tuple[Any, int, int]:
    """vLLM's own KV cache grouping for these layers, and (scheduler, hash) block sizes."""
    kcu = importlib.import_module("vllm.v1.core.kv_cache_utils")
    planner = _planner(kcu)
    get_configs = planner.get_kv_cache_configs
    cache = vllm_config.cache_config
    cache.num_gpu_blocks_override = num_blocks
    args: list[Any] = [vllm_config, [specs], [1 << 50]]
    if "global_kv_cache_groups" in inspect.signature(get_configs).parameters:
        # the engine groups the whole model's layers first, then plans each worker (EngineCore does)
        args.append(planner.get_global_kv_cache_groups(vllm_config, [specs]))
    configs = get_configs(*args)
    gen = getattr(kcu, "generate_scheduler_kv_cache_config", None)
    kv = gen(configs) if gen is not None else configs[0]
    groups = kv.kv_cache_groups
    if groups:
        cache.block_size = min(g.kv_cache_spec.block_size for g in groups)
    cache.num_gpu_blocks = kv.num_blocks
    resolve = getattr(kcu, "resolve_kv_cache_block_sizes", None)
    if resolve is None:
        return kv, int(cache.block_size), int(cache.block_size)
    sched_bs, hash_bs = resolve(kv, vllm_config)
    return kv, int(sched_bs), int(hash_bs)


def _planner(kcu: Any) -> Any:
    """The module holding `get_kv_cache_configs`: kv_cache_utils, or the planning module a release
    moved it to (the one EngineCore imports it from), found by what it holds."""
    if hasattr(kcu, "get_kv_cache_configs"):
        return kcu
    for name in ("vllm.v1.core.kv_cache_planning",):
        try:
            mod = importlib.import_module(name)
        except ImportError:
            continue
        if hasattr(mod, "get_kv_cache_configs"):
            return mod
    raise SizingError("group the KV cache", "no get_kv_cache_configs in kv_cache_utils or kv_cache_planning")


def describe_groups(kv: Any) -> list[dict[str, Any]]:
    out = []
    for g in kv.kv_cache_groups:
        spec = g.kv_cache_spec
        out.append(
            {
                "spec": type(spec).__name__,
                "layers": len(g.layer_names),
                "block_size": int(spec.block_size),
                "mamba_cache_mode": getattr(spec, "mamba_cache_mode", None),
                "page_size_bytes": int(getattr(spec, "page_size_bytes", 0)),
            }
        )
    return out


def diagnose_model(hf_config: dict[str, Any]) -> dict[str, str] | None:
    """Why vLLM could not build the ModelConfig, where the cause is the model class, not the file.

    A registered class whose module does not import (a missing dependency) could not run here;
    a class this release does not have (removed, out of tree, remote code only) is bad input,
    with what vLLM's own registry says about it.
    """
    from vllm.model_executor.models import ModelRegistry

    regmod = importlib.import_module("vllm.model_executor.models.registry")
    archs = [str(a) for a in hf_config.get("architectures") or []]
    models = getattr(ModelRegistry, "models", {})
    for arch in archs:
        module = getattr(models.get(arch), "module_name", None)
        if not module:
            continue
        try:
            importlib.import_module(module)
        except Exception as exc:
            return {
                "kind": "model_import",
                "message": f"vLLM's module for {arch} ({module}) cannot be imported: "
                f"{type(exc).__name__}: {exc}",
                "hint": "install what it needs into the vLLM environment (the config.json itself is fine)",
            }
    if any(a in models for a in archs):
        return None
    previous = getattr(regmod, "_PREVIOUSLY_SUPPORTED_MODELS", {}) or {}
    out_of_tree = getattr(regmod, "_OOT_SUPPORTED_MODELS", {}) or {}
    for arch in archs:
        if arch in previous:
            return {
                "kind": "model_unsupported",
                "message": f"this vLLM has no {arch}: vLLM supported it until v{previous[arch]}",
                "hint": f"judge it with a release that has it, e.g. --vllm {previous[arch]}",
            }
        if arch in out_of_tree:
            return {
                "kind": "model_unsupported",
                "message": f"this vLLM has no {arch}: it moved out of tree ({out_of_tree[arch]})",
                "hint": "install that plugin into the vLLM environment",
            }
    if hf_config.get("auto_map"):
        return {
            "kind": "model_unsupported",
            "message": f"this vLLM has no model class {', '.join(archs)}: the config.json names remote "
            "code (auto_map), which vLLM runs only with trust_remote_code",
            "hint": "pd-doctor does not run a model's remote code; use a vLLM release with a native "
            "class for this architecture",
        }
    return {
        "kind": "model_unsupported",
        "message": f"this vLLM has no model class {', '.join(archs) or '(none named)'}",
        "hint": "use a vLLM release that has it (see vLLM's supported models list)",
    }
