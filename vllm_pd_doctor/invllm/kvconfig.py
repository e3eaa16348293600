"""The model as vLLM sees it, and the configs, KV cache groups and Scheduler each run needs.

Runs INSIDE the target vLLM interpreter (stdlib + vllm only). For the user's model config it
asks vLLM for the model class and its Mamba state, sizes the KV cache blocks with the
platform's own code (`sizing.py`), groups the KV cache with vLLM's own code and builds vLLM's
real `Scheduler` with the real KV connector scheduler half and KV cache manager.
"""

from __future__ import annotations

import copy
import importlib
import json
import os
import time
from typing import Any

from . import connectors, drive, platformrules, sizing

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

    def __init__(self, message: str, stage: str = "group the KV cache") -> None:
        super().__init__(stage, message)


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
        self.model_config = self._model_config()
        self.facts = sizing.model_facts(self.model_config)
        self.config_s = time.perf_counter() - t1
        self._built: dict[tuple[str, int], Any] = {}
        self._layers: dict[str, Any] | None = None
        self._layers_error: str | None = None
        self.layers_s: float | None = None

    def _model_config(self) -> Any:
        """vLLM's ModelConfig for the model directory (ModelError: the model class is the cause)."""
        spec = self.spec
        try:
            return construct(
                "build ModelConfig",
                self.vcfg.ModelConfig,
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

    def build(self, connector_name: str, budget: int) -> dict[str, Any]:
        """VllmConfig -> the platform's block sizing -> vLLM's KV cache groups."""
        key = (connector_name, budget)
        if key in self._built:
            return self._built[key]  # type: ignore[no-any-return]
        vllm_config, requested_mode, not_from_vllm = self._vllm_config(connector_name, budget)
        try:
            built = self._size(vllm_config, connector_name, requested_mode)
        except sizing.SizingError as exc:
            err = InternalsError(exc.stage, exc.message)
            if exc.stage == "find the state layers":
                err.kind = "no_state_group"  # type: ignore[attr-defined]
            raise err from exc
        sz = built["sizing"]
        sz["not_from_vllm"] = [*not_from_vllm, *sz["not_from_vllm"]]
        if self._layers_error is not None:
            sz["not_from_vllm"].append(f"KV cache specs: {sz['layers']['from']}")
        self._built[key] = built
        return built

    def _cache_config(self) -> Any:
        spec = self.spec
        cache_kwargs: dict[str, Any] = {"enable_prefix_caching": True, "gpu_memory_utilization": 0.5}
        if spec.get("block_size"):
            cache_kwargs["block_size"] = int(spec["block_size"])
        if spec.get("mamba_cache_mode"):
            cache_kwargs["mamba_cache_mode"] = spec["mamba_cache_mode"]
        if spec.get("prefix_match_unit"):
            cache_kwargs["prefix_match_unit"] = int(spec["prefix_match_unit"])
        return construct("build CacheConfig", self.vcfg.CacheConfig, **cache_kwargs)

    def _vllm_config(self, connector_name: str, budget: int) -> tuple[Any, Any, list[str]]:
        """vLLM's VllmConfig for one connector and token budget, the mamba_cache_mode asked of
        CacheConfig before VllmConfig's rewrites, and what the platform rules did not take from vLLM."""
        vcfg, spec = self.vcfg, self.spec
        cache_config = self._cache_config()
        requested_mode = cache_config.mamba_cache_mode
        scheduler_config = construct(
            "build SchedulerConfig",
            vcfg.SchedulerConfig,
            max_num_seqs=8,
            max_num_batched_tokens=budget,
            max_model_len=int(self.model_config.max_model_len),
            enable_chunked_prefill=True,
            is_encoder_decoder=False,
            async_scheduling=False,
        )
        # A hybrid (Mamba-state) model gets the mode vLLM needs for it (MoRIIO: READ); any other
        # model the connector's default mode (MoRIIO: WRITE), as a deployment would run it.
        extra = next(
            (dict(c.hybrid_extra) for c in connectors.all_connectors() if connector_name in c.vllm_names), {}
        )
        if not self.facts["has_mamba_state"]:
            extra = {}
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
        return vllm_config, requested_mode, list(not_from_vllm)

    def _size(self, vllm_config: Any, connector_name: str, requested_mode: Any) -> dict[str, Any]:
        """The platform's block sizing, the layers' specs and vLLM's KV cache groups for this
        VllmConfig (its max_model_len cut to what N needs), as the build the runs use."""
        spec, cache = self.spec, vllm_config.cache_config
        max_len = int(self.model_config.max_model_len)
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
        return {
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
    try:
        return construct(
            "build Scheduler",
            Scheduler,
            vllm_config=vllm_config,
            kv_cache_config=kv_cache_config,
            structured_output_manager=construct(
                "build StructuredOutputManager", som, vllm_config=vllm_config
            ),
            block_size=block_size,
            hash_block_size=hash_block_size,
            log_stats=False,
        )
    except InternalsError as exc:
        # The connector's scheduler half refuses this model's KV cache layout (MoRIIO with Mamba
        # groups from 0.30): vLLM would not start it, as a config rule would not.
        _, sep, said = exc.message.partition("NotImplementedError: ")
        if not sep:
            raise
        name = vllm_config.kv_transfer_config.kv_connector
        raise NotServable(f"vLLM would not start this model with {name}: {said}", "build Scheduler") from exc
