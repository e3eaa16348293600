"""The live engine's family shrinking (assets/scripts/shrink_config.py) and `--model FAMILY` lookup.

No vLLM here: the shrunken config of every bundled hybrid family still has at least one attention
layer and one Mamba / linear-attention layer in the family's own pattern fields, and small sizes;
the live test (tests/repro/live/test_live.py) serves one such model on a real pair.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from vllm_pd_doctor.infra.errors import BadInput
from vllm_pd_doctor.repro.live import engines, options

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("shrink_config", ROOT / "assets/scripts/shrink_config.py")
assert _spec is not None and _spec.loader is not None
shrink_config = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(shrink_config)
FAMILIES = ("granite-4.0-h-tiny", "nemotron-h", "qwen3-next", "falcon-h1", "jamba", "zamba2")


def _layers(cfg: dict[str, Any]) -> list[str]:
    """Per layer: 'attn', 'mamba' or 'both' (parallel hybrid), from the family's own fields."""
    n = cfg["num_hidden_layers"]
    t = cfg["model_type"]
    if t == "nemotron_h":
        kinds = {"M": "mamba", "*": "attn", "-": "mlp", "E": "moe"}
        return [kinds[c] for c in cfg["hybrid_override_pattern"]]
    if t == "qwen3_next" and "layer_types" not in cfg:  # the public config: every k-th is attention
        k = cfg["full_attention_interval"]
        return ["attn" if (i + 1) % k == 0 else "mamba" for i in range(n)]
    if t in ("granitemoehybrid", "qwen3_next"):
        return ["attn" if "attention" in x and "linear" not in x else "mamba" for x in cfg["layer_types"]]
    if t == "jamba":
        return [
            "attn" if i % cfg["attn_layer_period"] == cfg["attn_layer_offset"] else "mamba" for i in range(n)
        ]
    if t == "zamba2":
        return ["both" if x == "hybrid" else "mamba" for x in cfg["layers_block_type"]]
    if t == "falcon_h1":
        return ["both"] * n
    raise AssertionError(t)


@pytest.mark.parametrize("family", FAMILIES)
def test_shrunk_family_keeps_attention_and_mamba(family: str) -> None:
    cfg = json.loads((ROOT / "assets/models" / family / "config.json").read_text())
    tiny = shrink_config.shrink(cfg)
    assert tiny["model_type"] == cfg["model_type"] and tiny["architectures"] == cfg["architectures"]
    kinds = _layers(tiny)
    assert len(kinds) == tiny["num_hidden_layers"] <= 3
    assert {"attn", "both"} & set(kinds) and {"mamba", "both"} & set(kinds), kinds
    assert tiny["vocab_size"] == 512 and tiny["hidden_size"] == 128
    assert len(kinds) < len(_layers(cfg)) or cfg["num_hidden_layers"] > tiny["num_hidden_layers"]


def test_unknown_model_type_is_refused() -> None:
    with pytest.raises(KeyError):
        shrink_config.shrink({"model_type": "llama", "architectures": ["LlamaForCausalLM"]})


def test_model_family_name_resolves_to_the_bundled_config() -> None:
    assert options.live_model(Path("nemotron-h")) == ROOT / "assets/models/nemotron-h"
    assert options.live_model(ROOT / "assets/models/jamba/config.json") == ROOT / "assets/models/jamba"
    with pytest.raises(BadInput) as exc:
        options.live_model(Path("no-such-family"))
    assert "nemotron-h" in str(exc.value.hint)


def test_family_cache_dir_is_per_family_and_content(tmp_path: Path) -> None:
    a = engines.family_cache_dir(ROOT / "assets/models/zamba2")
    assert a.name.startswith("zamba2-") and a == engines.family_cache_dir(ROOT / "assets/models/zamba2")
    own = tmp_path / "zamba2"
    own.mkdir()
    (own / "config.json").write_text('{"model_type": "zamba2"}')
    assert engines.family_cache_dir(own) != a
    assert not engines.has_weights(ROOT / "assets/models/zamba2")


def test_engine_args_only_for_the_family_that_needs_them() -> None:
    cfg = json.loads((ROOT / "assets/models/qwen3-next/config.json").read_text())
    assert shrink_config.engine_args(cfg) == ["--mamba-ssm-cache-dtype", "float32"]
    assert shrink_config.ENGINE_ARGS_FILE == engines.ENGINE_ARGS_FILE
    assert shrink_config.engine_args({"model_type": "zamba2"}) == []
