"""Deployment formats whose engine command a controller or chart builds from fields, read as that
controller builds it (nothing is rendered or contacted):

- KServe `LLMInferenceService` (serving.kserve.io): `spec.template` is the decode (main) pool,
  `spec.prefill.template` the prefill pool; the controller's template runs
  `vllm serve /mnt/models --served-model-name NAME --port 8000 $VLLM_ADDITIONAL_ARGS "$@"`
  (kserve config/llmisvcconfig/config-llm-*template.yaml), the container's `args` being `$@`.
  `spec.parallelism` gives the TP/DP flags; a container with its own `command` replaces it.
- Helm values of the vLLM production-stack and llm-d-modelservice charts: `charts.py`.
- Ray Serve LLM config (`applications:` with `build_pd_openai_app` / `prefill_config` /
  `decode_config`, or `llm_configs`): each LLMConfig's `engine_kwargs` are vLLM engine arguments.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from vllm_pd_doctor.checkconfig.parse import bounded, charts
from vllm_pd_doctor.checkconfig.parse.found import Found
from vllm_pd_doctor.checkconfig.parse.manifests import env_map
from vllm_pd_doctor.checkconfig.parse.shell import Interp
from vllm_pd_doctor.errors import BadInput

KSERVE_SCRIPT = (
    'eval "exec vllm serve /mnt/models --served-model-name ${__PDD_NAME} --port 8000 '
    '${VLLM_ADDITIONAL_ARGS} $@"'
)


def merge(base: Any, over: Any) -> Any:
    """Kubernetes strategic merge as controllers apply it to templates: mappings merge key by key,
    lists of named entries (containers, env) merge by name, anything else: `over` wins."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = merge(base[k], v) if k in base else v
        return out
    if isinstance(base, list) and isinstance(over, list) and _named(base) and _named(over):
        names = [e["name"] for e in over]
        merged = [merge(e, over[names.index(e["name"])]) if e["name"] in names else e for e in base]
        return merged + [e for e in over if e["name"] not in {b["name"] for b in base}]
    return over


def _map(d: Mapping[str, Any], key: str) -> dict[str, Any]:
    """d[key] when it is a mapping, else an empty one."""
    v = d.get(key)
    return dict(v) if isinstance(v, Mapping) else {}


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(e, dict) and "name" in e for e in items)


def prepare(docs: list[Any]) -> list[Any]:
    """Templates resolved as the controllers do: RoleBasedGroup `templateRef` (+ `patch`) from
    `spec.roleTemplates`, KServe `baseRefs` from LLMInferenceServiceConfig documents in the file."""
    configs = {
        str((d.get("metadata") or {}).get("name", "")): d.get("spec") or {}
        for d in docs
        if isinstance(d, dict) and d.get("kind") == "LLMInferenceServiceConfig"
    }
    out: list[Any] = []
    for d in docs:
        if not isinstance(d, dict):
            out.append(d)
        elif d.get("kind") == "LLMInferenceServiceConfig":
            continue  # read through the services that name it
        elif d.get("kind") == "LLMInferenceService" and isinstance(d.get("spec"), dict):
            spec: Any = {}
            missing = []
            for ref in d["spec"].get("baseRefs") or []:
                name = str(ref.get("name")) if isinstance(ref, dict) else ""
                if name in configs:
                    spec = merge(spec, configs[name])
                elif name and not name.startswith("kserve-config-llm"):  # not a controller default
                    missing.append(name)
            out.append({**d, "spec": merge(spec, d["spec"]), "__pdd_missing_refs": missing})
        elif d.get("kind") == "RoleBasedGroup" and isinstance(d.get("spec"), dict):
            temps = {
                str(t.get("name")): t.get("template")
                for t in d["spec"].get("roleTemplates") or []
                if isinstance(t, dict)
            }
            out.append(_resolve_refs(d, temps))
        else:
            out.append(d)
    return out


def _resolve_refs(obj: Any, temps: Mapping[str, Any]) -> Any:
    if isinstance(obj, list):
        return [_resolve_refs(x, temps) for x in obj]
    if not isinstance(obj, dict):
        return obj
    out = {k: _resolve_refs(v, temps) for k, v in obj.items() if k != "roleTemplates"}
    ref = obj.get("templateRef")
    if isinstance(ref, dict) and str(ref.get("name")) in temps:
        patch = ref.get("patch") or obj.get("templatePatch") or {}
        out.pop("templateRef")
        out.pop("templatePatch", None)
        out["template"] = merge(temps[str(ref["name"])], patch)
    return out


def from_docs(docs: list[Any], label: str, variables: Mapping[str, str]) -> list[Found] | None:
    """The servers of these formats; None when no document is one of them."""
    out: list[Found] = []
    seen = False
    for d in docs:
        if not isinstance(d, dict):
            continue
        if str(d.get("kind", "")) == "LLMInferenceService":
            seen = True
            out.extend(_llmisvc(d, label, variables))
        elif charts.is_chart_values(d):
            seen = True
            out.extend(charts.from_values(d, variables))
        elif d.get("kind") == "RayService" and isinstance(_map(d, "spec").get("serveConfigV2"), str):
            docs_ = bounded.load_yaml_all(d["spec"]["serveConfigV2"], f"{label} (serveConfigV2)")
            serve = docs_[0] if docs_ else None  # KubeRay: the Serve config as text
            if isinstance(serve, dict) and isinstance(serve.get("applications"), list):
                seen = True
                for app in serve["applications"]:
                    out.extend(_ray_app(app))
        elif isinstance(d.get("applications"), list) and any(_ray_app(a) for a in d["applications"]):
            seen = True
            for app in d["applications"]:
                out.extend(_ray_app(app))
    return out if seen else None


# --- KServe LLMInferenceService ------------------------------------------------------------------


def _hf_id(uri: str) -> str:
    for pre in ("hf://", "huggingface://"):
        if uri.startswith(pre):
            return uri[len(pre) :].strip("/")
    return uri


def _main_container(template: Any) -> dict[str, Any]:
    if not isinstance(template, dict):
        return {}
    cs = template.get("containers")
    if not isinstance(cs, list):
        return {}
    for c in cs:
        if isinstance(c, dict) and c.get("name") in ("main", None):
            return c
    return next((c for c in cs if isinstance(c, dict)), {})


def _env_list(raw: Any) -> dict[str, str]:
    return env_map(raw, "LLMInferenceService env")


def _has_ktc(args: list[str]) -> bool:
    return any(a.replace("_", "-").startswith("--kv-transfer-config") for a in args)


def _parallel_flags(par: Any) -> list[str]:
    if not isinstance(par, dict):
        return []
    out: list[str] = []
    for key, flag in (
        ("tensor", "--tensor-parallel-size"),
        ("pipeline", "--pipeline-parallel-size"),
        ("data", "--data-parallel-size"),
        ("dataLocal", "--data-parallel-size-local"),
    ):
        if par.get(key) is not None:
            out += [flag, str(par[key])]
    if par.get("expert") is True:
        out.append("--enable-expert-parallel")
    return out


def _llmisvc(doc: dict[str, Any], label: str, variables: Mapping[str, str]) -> list[Found]:
    spec = _map(doc, "spec")
    meta = _map(doc, "metadata")
    name = str(meta.get("name", "llmisvc"))
    model = _map(spec, "model")
    uri = str(model.get("uri", ""))
    served = str(model.get("name") or _hf_id(uri) or name)
    if uri.startswith(("hf://", "huggingface://")):
        model_arg = _hf_id(uri)
    elif re.fullmatch(r"[\w.-]+/[\w.-]+", served):
        model_arg = served  # /mnt/models holds it (pvc://, s3://): named by spec.model.name
    else:
        model_arg = "/mnt/models"
    main = _main_container(spec.get("template"))
    pools: list[tuple[str, dict[str, Any], Any]] = []
    pre = spec.get("prefill")
    if isinstance(pre, dict):
        pc = _main_container(pre.get("template")) or main
        pools.append(("prefill", pc, pre.get("parallelism", spec.get("parallelism"))))
        pools.append(("decode", main, spec.get("parallelism")))
    else:
        pools.append(("decode", main, spec.get("parallelism")))
    out: list[Found] = []
    for role, c, par in pools:
        env = _env_list(c.get("env"))
        args = [str(a) for a in c.get("args") or []] + _parallel_flags(par)
        ev = f"KServe LLMInferenceService {name} {role} pool: its own pods"
        it = Interp({**env, **variables, "__PDD_NAME": served}, pinned=variables)
        it.exported |= set(env)
        it.ctx[0].env = dict(env)
        it.ctx[0].launcher = "LLMInferenceService > "
        it.ctx[0].network, it.ctx[0].network_evidence = f"pod:{name}/{role}", ev
        if c.get("command"):
            cmd = [str(x) for x in c["command"]]
            it._launch([*cmd, *args], {}, " ".join(cmd))
        else:
            it.sc.positional = args
            it.run_text(KSERVE_SCRIPT.replace("/mnt/models", model_arg))
        if doc.get("__pdd_missing_refs") and not any(
            "kv-transfer-config" in " ".join(f.args) for f in it.found
        ):
            refs = ", ".join(doc["__pdd_missing_refs"])
            raise BadInput(
                f"{label}: LLMInferenceService {name} takes its pods from LLMInferenceServiceConfig "
                f"{refs}, which is not in this file",
                hint="append that LLMInferenceServiceConfig to the file (after a --- line)",
            )
        for f in it.found:
            where = "spec.prefill" if role == "prefill" else "spec.template (main pool)"
            f.role, f.role_source = role, f"LLMInferenceService {where}"
            f.name = f"{name}/{role}"
            f.image = str(c["image"]) if c.get("image") else None
            if not c.get("command"):
                f.launcher = "LLMInferenceService > controller template (vllm serve)"
            out.append(f)
    return out


# --- Ray Serve LLM ---------------------------------------------------------------------------------


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


def llm_config(cfg: Mapping[str, Any], role: str | None, name: str, source: str) -> Found:
    """One Ray Serve LLMConfig (mapping form) -> the engine it starts."""
    mlc = _map(cfg, "model_loading_config")
    model = str(mlc.get("model_source") or mlc.get("model_id") or "")
    ek = _map(cfg, "engine_kwargs")
    rt = _map(cfg, "runtime_env")
    env_vars = _map(rt, "env_vars")
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


def _ray_app(app: Any) -> list[Found]:
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
