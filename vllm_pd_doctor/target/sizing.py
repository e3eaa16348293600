"""The model and the KV cache sizes a real engine would use, computed by the installed vLLM.

Runs INSIDE the target vLLM interpreter (stdlib + vllm only). Nothing here re-derives vLLM's
rules: the model class comes from vLLM's ModelRegistry, the Mamba state from the class's own
`get_mamba_state_shape_from_config` / `get_mamba_state_dtype_from_config`, the block size from
the platform's own `update_block_size_for_backend` (which runs `_align_hybrid_block_size` or
whatever the release calls it), the KV cache groups from `get_kv_cache_configs`, and the hash
granularity from `resolve_kv_cache_block_sizes`. Every call is feature-detected.
"""

from __future__ import annotations

import importlib
from typing import Any

from .drive import construct

# Which attention backend a platform's engine picks for a plain decoder model (our only
# choice here: the engine picks it from the model's layers, which we do not build).
PLATFORM_BACKENDS = {"cpu": "CPU_ATTN", "cuda": "FLASH_ATTN"}
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
    shapes = cls.get_mamba_state_shape_from_config(vllm_config)
    dtypes = cls.get_mamba_state_dtype_from_config(vllm_config)
    return tuple(tuple(int(d) for d in s) for s in shapes), tuple(dtypes)


def layer_counts(model_config: Any, parallel_config: Any) -> dict[str, Any]:
    """Attention and Mamba-state layers, from vLLM's own (normalised) view of the config.

    vLLM rewrites every family's layer description into `layer_types` of its hf text config
    (`full_attention`, `linear_attention` for a Mamba/GDN mixer, `hybrid` for a layer with both,
    `mlp`); without it, ModelConfig.get_num_layers_by_block_type counts.
    """
    total = int(model_config.get_num_layers(parallel_config))
    text = getattr(model_config, "hf_text_config", None)
    types = getattr(text, "layer_types", None)
    if isinstance(types, (list, tuple)) and types:
        kinds = [str(t) for t in types]
        attn = sum(k in ("full_attention", "attention", "hybrid") for k in kinds)
        mamba = sum(k in ("linear_attention", "mamba", "hybrid") for k in kinds)
        return {
            "total": total,
            "attention": attn,
            "mamba": mamba,
            "from": "hf_text_config.layer_types",
            "kinds": sorted(set(kinds)),
        }
    count = model_config.get_num_layers_by_block_type
    attn = int(count(parallel_config, "attention"))
    mamba = int(count(parallel_config, "mamba")) or total - attn
    return {
        "total": total,
        "attention": attn,
        "mamba": mamba,
        "from": "ModelConfig.get_num_layers_by_block_type",
    }


def _backend(platform: str) -> Any:
    reg = importlib.import_module("vllm.v1.attention.backends.registry")
    enum = getattr(reg, "AttentionBackendEnum", None) or getattr(reg, "_Backend", None)
    member = getattr(enum, PLATFORM_BACKENDS[platform], None) if enum is not None else None
    if member is None or not hasattr(member, "get_class"):
        raise SizingError(
            "choose the attention backend", f"this vLLM has no {PLATFORM_BACKENDS[platform]} backend entry"
        )
    return member.get_class()


def _platform_class(platform: str) -> Any:
    from vllm.platforms import current_platform

    if platform == "cpu":
        return importlib.import_module("vllm.platforms.cpu").CpuPlatform
    if current_platform.is_cuda():
        return type(current_platform)
    # A CPU box preparing a CUDA deployment: CudaPlatform cannot be imported without the
    # CUDA build, and it inherits its block sizing from the base Platform.
    cuda = importlib.import_module("vllm.platforms.interface").Platform
    return cuda


def native_platform() -> str:
    from vllm.platforms import current_platform

    return "cuda" if current_platform.is_cuda() else "cpu"


def align_block_size(vllm_config: Any, platform: str, requested: int | None) -> dict[str, Any]:
    """Run the platform's own block sizing on `vllm_config` (in place); say what it did."""
    from vllm.config import CacheConfig

    cache = vllm_config.cache_config
    before = int(cache.block_size)
    if platform != native_platform() and requested is None:
        # VllmConfig ran this interpreter's platform defaults; start from the target's.
        cache.block_size = int(getattr(CacheConfig, "DEFAULT_BLOCK_SIZE", 16))
    start = int(cache.block_size)
    pcls = _platform_class(platform)
    backend = _backend(platform)
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
    }


def kv_cache_specs(
    vllm_config: Any,
    cls: Any,
    counts: dict[str, Any],
    platform: str,
) -> dict[str, Any]:
    iface = importlib.import_module("vllm.v1.kv_cache_interface")
    from vllm.utils.torch_utils import STR_DTYPE_TO_TORCH_DTYPE

    mc, cache, pc = vllm_config.model_config, vllm_config.cache_config, vllm_config.parallel_config
    kv_dtype = mc.dtype if cache.cache_dtype == "auto" else STR_DTYPE_TO_TORCH_DTYPE[cache.cache_dtype]
    specs: dict[str, Any] = {}
    if counts["attention"]:
        attn = construct(
            "build FullAttentionSpec",
            iface.FullAttentionSpec,
            block_size=int(cache.block_size),
            num_kv_heads=mc.get_num_kv_heads(pc),
            head_size=mc.get_head_size(),
            dtype=kv_dtype,
        )
        backend = _backend(platform)
        if hasattr(backend, "customize_spec"):
            attn = backend.customize_spec(attn)
        for i in range(counts["attention"]):
            specs[f"model.layers.{i}.self_attn.attn"] = attn
    shapes, dtypes = mamba_state(vllm_config, cls)
    mamba = construct(
        "build MambaSpec",
        iface.MambaSpec,
        shapes=shapes,
        dtypes=dtypes,
        block_size=int(cache.mamba_block_size or cache.block_size),
        page_size_padded=getattr(cache, "mamba_page_size_padded", None),
        mamba_cache_mode=cache.mamba_cache_mode,
        num_speculative_blocks=0,
    )
    for i in range(counts["mamba"]):
        specs[f"model.layers.{i}.mixer"] = mamba
    return specs


def resolve_layout(vllm_config: Any, specs: dict[str, Any], platform: str) -> str | None:
    """Where the release resolves one KV cache layout in the engine core, do it the same way."""
    utils = importlib.import_module("vllm.v1.attention.backends.utils")
    resolve = getattr(utils, "resolve_kv_cache_layout", None)
    supported = getattr(utils, "get_supported_kv_cache_layouts", None)
    if resolve is None or supported is None:
        return None
    names = [layout.name for layout in supported([_backend(platform)])]
    layout = resolve(vllm_config, [names], list(specs.values()))
    return str(getattr(layout, "name", layout))


def kv_cache_config(
    vllm_config: Any,
    specs: dict[str, Any],
    num_blocks: int,
) -> tuple[Any, int, int]:
    """vLLM's own KV cache grouping for these layers, and (scheduler, hash) block sizes."""
    kcu = importlib.import_module("vllm.v1.core.kv_cache_utils")
    get_configs = getattr(kcu, "get_kv_cache_configs", None)
    if get_configs is None:
        raise SizingError("group the KV cache", "kv_cache_utils has no get_kv_cache_configs")
    cache = vllm_config.cache_config
    cache.num_gpu_blocks_override = num_blocks
    configs = get_configs(vllm_config, [specs], [1 << 50])
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
