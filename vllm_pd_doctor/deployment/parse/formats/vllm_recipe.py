"""vLLM recipes (github.com/vllm-project/recipes): a model's recipe YAML (`model.model_id`,
`model.base_args` / `base_env`, `strategy_overrides.pd_cluster.{prefill,decode}`) and the
`pd_cluster` strategy it names (`strategies/pd_cluster.yaml`: per role `vllm_args` and `env`,
among them the port and the kv-transfer-config). Each role is one `vllm serve MODEL` with the
model's base args, the strategy's role args, then the recipe's role overrides (the recipe site's
order); env the same way. Parallelism the site derives from the node count and GPUs per node is
not in the files and is left out.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from vllm_pd_doctor.deployment.parse import bounded
from vllm_pd_doctor.deployment.parse.found import Found
from vllm_pd_doctor.deployment.parse.registry import DeploymentFormat, Source
from vllm_pd_doctor.infra.errors import BadInput

STRATEGY = "pd_cluster"
_ROLES = ("prefill", "decode")


def sniff(src: Source) -> bool:
    return any(_strategy(d) or _recipe(d) for d in src.docs)


def read(src: Source) -> list[Found]:
    recipe = next((d for d in src.docs if _recipe(d)), None)
    strategy = next((d for d in src.docs if _strategy(d)), None) or _beside(src)
    if strategy is None:
        raise BadInput(
            f"{src.label}: a vLLM recipe for the {STRATEGY} strategy: the roles' flags (port, "
            f"kv-transfer-config) are in the recipes repository's strategies/{STRATEGY}.yaml, not here",
            hint=f"append strategies/{STRATEGY}.yaml to this file (after a --- line)",
        )
    model = _map(recipe, "model") if recipe else {}
    over = _map(_map(recipe, "strategy_overrides"), STRATEGY) if recipe else {}
    out: list[Found] = []
    for role in _ROLES:
        base, mine = _map(strategy, role), _map(over, role)
        args = [str(model["model_id"])] if model.get("model_id") else []
        args += _list(model.get("base_args")) + _list(base.get("vllm_args")) + _list(mine.get("vllm_args"))
        env = {**_env(base), **_env(model, "base_env"), **_env(over), **_env(mine)}
        f = Found(
            args,
            env,
            f"vLLM recipe ({STRATEGY}) > vllm serve",
            role=role,
            role_source=f"recipe {STRATEGY} {role}:",
            name=role,
            network=None,
            network_evidence=f"{STRATEGY}: a node pool per role (hosts not in the file)",
        )
        out.append(f)
    return out


FORMAT = DeploymentFormat("vllm-recipe", sniff, read)


def _map(d: Any, key: str) -> dict[str, Any]:
    v = d.get(key) if isinstance(d, Mapping) else None
    return dict(v) if isinstance(v, Mapping) else {}


def _list(v: Any) -> list[str]:
    return [str(x) for x in v] if isinstance(v, list) else []


def _env(d: Mapping[str, Any], key: str = "env") -> dict[str, str]:
    return {str(k): "" if v is None else str(v) for k, v in _map(d, key).items()}


def _strategy(d: Any) -> bool:
    """The pd_cluster strategy: roles with `vllm_args` (and no `kind`: not a Kubernetes object)."""
    return (
        isinstance(d, dict)
        and "kind" not in d
        and all(isinstance(d.get(r), dict) for r in _ROLES)
        and any("vllm_args" in d[r] for r in _ROLES)
    )


def _recipe(d: Any) -> bool:
    """A model's recipe that documents the pd_cluster strategy."""
    if not isinstance(d, dict) or not _map(d, "model").get("model_id"):
        return False
    return STRATEGY in _list(d.get("compatible_strategies")) or bool(
        _map(_map(d, "strategy_overrides"), STRATEGY)
    )


def _beside(src: Source) -> dict[str, Any] | None:
    """The strategy file where the recipes repository keeps it (models/PROVIDER/MODEL.yaml ->
    strategies/pd_cluster.yaml)."""
    if src.base is None:
        return None
    path = Path(src.base) / ".." / ".." / "strategies" / f"{STRATEGY}.yaml"
    if not path.is_file():
        return None
    docs = bounded.load_yaml_all(bounded.read_text(path, str(path)), str(path))
    return docs[0] if docs and _strategy(docs[0]) else None
