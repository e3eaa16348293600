"""Ray Serve LLM config in YAML: a Serve config (`applications:` with `build_pd_openai_app`'s
`prefill_config` / `decode_config`, or `llm_configs`), alone or as a KubeRay `RayService`'s
`serveConfigV2` text. Each LLMConfig's `engine_kwargs` are vLLM engine arguments.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from vllm_pd_doctor.deployment.parse import bounded
from vllm_pd_doctor.deployment.parse.found import Found
from vllm_pd_doctor.deployment.parse.registry import DeploymentFormat, Source


def sniff(src: Source) -> bool:
    return any(_is_ray_service(d) or _is_serve_config(d) for d in src.docs)


def read(src: Source) -> list[Found] | None:
    out: list[Found] = []
    seen = False
    for d in src.docs:
        if _is_ray_service(d):
            docs = bounded.load_yaml_all(d["spec"]["serveConfigV2"], f"{src.label} (serveConfigV2)")
            serve = docs[0] if docs else None  # KubeRay: the Serve config as text
            if isinstance(serve, dict) and isinstance(serve.get("applications"), list):
                seen = True
                for app in serve["applications"]:
                    out.extend(_app(app))
        elif _is_serve_config(d):
            seen = True
            for app in d["applications"]:
                out.extend(_app(app))
    return out if seen else None


FORMAT = DeploymentFormat("ray-serve-yaml", sniff, read)


def _is_ray_service(d: Any) -> bool:
    spec = d.get("spec") if isinstance(d, dict) else None
    return (
        isinstance(d, dict)
        and d.get("kind") == "RayService"
        and isinstance(spec, dict)
        and isinstance(spec.get("serveConfigV2"), str)
    )


def _is_serve_config(d: Any) -> bool:
    return (
        isinstance(d, dict)
        and not _is_ray_service(d)
        and isinstance(d.get("applications"), list)
        and any(_app(a) for a in d["applications"])
    )


def engine_args(kwargs: Mapping[str, Any]) -> list[str]:
    """Ray Serve `engine_kwargs` (vLLM AsyncEngineArgs fields) -> `vllm serve` flags."""
    out: list[str] = []
    for key, value in kwargs.items():
        flag = "--" + str(key).replace("_", "-")
        if isinstance(value, bool):
            out.append(flag if value else "--no-" + flag[2:])
        elif isinstance(value, (dict, list)):
            out += [flag, json.dumps(value)]
        elif value is not None:
            out += [flag, str(value)]
    return out


def _map(d: Mapping[str, Any], key: str) -> dict[str, Any]:
    v = d.get(key)
    return dict(v) if isinstance(v, Mapping) else {}


def llm_config(cfg: Mapping[str, Any], role: str | None, name: str, source: str) -> Found:
    """One Ray Serve LLMConfig (mapping form) -> the engine it starts."""
    mlc = _map(cfg, "model_loading_config")
    model = str(mlc.get("model_source") or mlc.get("model_id") or "")
    ek = _map(cfg, "engine_kwargs")
    env_vars = _map(_map(cfg, "runtime_env"), "env_vars")
    env = {str(k): str(v) for k, v in env_vars.items()}
    f = Found(
        [model, *engine_args(ek)] if model else engine_args(ek),
        env,
        "Ray Serve LLM > vLLM engine",
        name=name,
        network=None,
        network_evidence="Ray Serve places each replica on a Ray worker node (host not in the config)",
    )
    if role:
        f.role, f.role_source = role, source
    return f


def _app(app: Any) -> list[Found]:
    if not isinstance(app, dict) or not isinstance(app.get("args"), dict):
        return []
    args = app["args"]
    name = str(app.get("name", "app"))
    out: list[Found] = []
    for key, role in (("prefill_config", "prefill"), ("decode_config", "decode")):
        if isinstance(args.get(key), dict):
            out.append(llm_config(args[key], role, f"{name}/{role}", f"Ray Serve {key}"))
    for k, cfg in enumerate(args.get("llm_configs") or []):
        if isinstance(cfg, dict):
            out.append(llm_config(cfg, None, f"{name}/llm-{k}", ""))
    return out
