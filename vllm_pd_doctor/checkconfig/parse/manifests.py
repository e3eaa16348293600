"""What the YAML/JSON formats share: Kubernetes-style resources of any kind (Pod, Deployment,
StatefulSet, LeaderWorkerSet, llm-d, Dynamo DynamoGraphDeployment, kthena ModelServing, ...) are
walked and every container (`command` + `args` + `env`) under them is looked at (`walk_docs`);
names on the way (service, role, container) and `subComponentType` give the roles. Also: env
lists, vLLM `--config` mappings as flags, the strategic merge controllers apply to templates.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

from vllm_pd_doctor.checkconfig.parse.symbolic import Interp
from vllm_pd_doctor.checkconfig.parse.wrappers import Found
from vllm_pd_doctor.infra.errors import BadInput
from vllm_pd_doctor.knowledge.readers.serve_flags import FLAGS

ROLES = ("prefill", "decode")
_NAMES = """spec template containers initContainers extraPodSpec mainContainer services roles
entryTemplate workerTemplate leaderTemplate leaderWorkerTemplate backend workers predictor decoder
worker standalonePattern leaderWorkerPattern customComponentsPattern patch templateRef roleTemplates"""
_STRUCTURAL = set(_NAMES.split())
_K8S_REF = re.compile(r"\$\(([A-Za-z_][A-Za-z0-9_]*)\)")


def scalar(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (dict, list)):
        return json.dumps(v)
    return "" if v is None else str(v)


def role_from_name(text: str) -> str | None:
    t = text.lower()
    p = "prefill" in t or "prefiller" in t
    d = "decode" in t or "decoder" in t
    return "prefill" if p and not d else "decode" if d and not p else None


def is_vllm_config(d: dict[str, Any]) -> bool:
    keys = [str(k).replace("_", "-") for k in d]
    known = sum(1 for k in keys if k in FLAGS)
    return (
        bool(keys) and known >= max(1, len(keys) // 2) and ("model" in keys or "kv-transfer-config" in keys)
    )


def config_args(cfg: Mapping[str, Any]) -> list[str]:
    """A vLLM `--config` YAML mapping -> flags, as vLLM's FlexibleArgumentParser makes them."""
    out: list[str] = []
    for key, value in cfg.items():
        k = str(key)
        if isinstance(value, bool):
            if value:
                out.append("--" + k)
            else:
                out.append("--no-" + k)
        elif isinstance(value, list):
            if value:
                out.append("--" + k)
                out.extend(str(x) for x in value)
        elif isinstance(value, dict):
            out.extend(["--" + k, json.dumps(value)])
        elif value is not None:
            out.extend(["--" + k, str(value)])
    return out


def env_map(raw: Any, what: str) -> dict[str, str]:
    env: dict[str, str] = {}
    if isinstance(raw, list):
        for item in raw:
            if isinstance(item, dict) and "name" in item:
                env[str(item["name"])] = _env_value(item)
            elif isinstance(item, str) and "=" in item:
                k, _, v = item.partition("=")
                env[k] = v
            elif isinstance(item, str):
                env[item] = "${" + item + "}"
            else:
                raise BadInput(f"{what}: env entries must be NAME=VALUE or name/value mappings")
    elif isinstance(raw, dict):
        env = {str(k): scalar(v) for k, v in raw.items()}
    elif raw is not None:
        raise BadInput(f"{what}: env must be a mapping or a list")
    return env


def _env_value(item: dict[str, Any]) -> str:
    if "value" in item:
        return scalar(item["value"])
    vf = item.get("valueFrom")
    if isinstance(vf, dict):
        ref = vf.get("fieldRef")
        if isinstance(ref, dict) and ref.get("fieldPath"):
            return f"<fieldRef:{ref['fieldPath']}>"
        for k in vf:
            return f"<valueFrom:{k}>"
    return ""


def run_argv(
    argv: list[str],
    env: dict[str, str],
    variables: Mapping[str, str],
    *,
    network: str | None = None,
    evidence: str = "",
    launcher: str = "",
) -> list[Found]:
    it = Interp({**env, **variables}, pinned=variables)
    it.ctx[0].env = dict(env)
    it.ctx[0].launcher, it.ctx[0].network, it.ctx[0].network_evidence = launcher, network, evidence
    it.exported |= set(env)
    it._launch(argv, {}, " ".join(argv))
    return it.found


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


def _named(items: list[Any]) -> bool:
    return bool(items) and all(isinstance(e, dict) and "name" in e for e in items)


# --- Kubernetes-style resources ---------------------------------------------------------------


def walk_docs(docs: list[Any], variables: Mapping[str, str]) -> list[Found] | None:
    """Every container under these resources that starts vLLM; None when a document is neither a
    mapping nor a list (not resources)."""
    docs = [d for d in docs if d is not None]
    if not docs or not all(isinstance(d, (dict, list)) for d in docs):
        return None
    out: list[Found] = []
    for d in docs:
        meta = d.get("metadata") if isinstance(d, dict) else None
        top = str(meta.get("name", "")) if isinstance(meta, dict) else ""
        kind = str(d.get("kind", "")) if isinstance(d, dict) else ""
        _walk(d, [top] if top else [], kind or "resource", top, False, out, variables)
    return out


def _walk(
    obj: Any,
    names: list[str],
    kind: str,
    top: str,
    host_net: bool,
    out: list[Found],
    variables: Mapping[str, str],
    svc: dict[str, Any] | None = None,
) -> None:
    if isinstance(obj, list):
        for item in obj:
            _walk(item, names, kind, top, host_net, out, variables, svc)
        return
    if not isinstance(obj, dict):
        return
    host_net = host_net or obj.get("hostNetwork") is True
    cfg = obj.get("config")
    if isinstance(cfg, dict) and not _is_container(obj) and is_vllm_config(cfg):
        obj = {**obj, "args": config_args(cfg)}
        obj.pop("config")
    if _is_container(obj):
        _container(obj, names, kind, top, host_net, out, variables, svc)
        return
    if (
        "subComponentType" in obj
        or "componentType" in obj
        or "envs" in obj
        or ("env" in obj and not _is_container(obj))
    ):
        svc = obj
    for k, v in obj.items():
        if k in (
            "metadata",
            "status",
            "volumes",
            "resources",
            "livenessProbe",
            "readinessProbe",
            "startupProbe",
        ):
            continue
        nm = str(v.get("name", "")) if isinstance(v, dict) else ""
        sub = [*names, str(k)] + ([nm] if nm else [])
        if isinstance(v, list):
            for item in v:
                n2 = str(item.get("name", "")) if isinstance(item, dict) else ""
                _walk(item, [*names, str(k)] + ([n2] if n2 else []), kind, top, host_net, out, variables, svc)
        else:
            _walk(v, sub, kind, top, host_net, out, variables, svc)


def _is_container(d: dict[str, Any]) -> bool:
    if not ("command" in d or "args" in d):
        return False
    return any(k in d for k in ("image", "name", "env", "args"))


def _container(
    c: dict[str, Any],
    names: list[str],
    kind: str,
    top: str,
    host_net: bool,
    out: list[Found],
    variables: Mapping[str, str],
    svc: dict[str, Any] | None,
) -> None:
    env = env_map(c.get("env"), f"{kind} {top}")
    if svc is not None and (svc.get("envs") or svc.get("env")):
        env = {**env_map(svc.get("envs") or svc.get("env"), f"{kind} {top}"), **env}
    st = str(c.get("type", "")).lower()
    if st in ROLES:
        names = [*names, st]
    path = _pod_path(names, kind)
    net = None if host_net else f"pod:{path}"
    ev = (
        "hostNetwork: true (the node's network)"
        if host_net
        else f"Kubernetes {kind} {path}: its own pod network namespace"
    )
    image = str(c.get("image", ""))
    cmd, args = _k8s_words(c.get("command"), env), _k8s_words(c.get("args"), env)
    for f in _start(cmd, args, env, image, variables, kind=kind, net=net, ev=ev):
        f.name, f.image = path, image or None
        _role_from_names(f, names, svc)
        out.append(f)


def _k8s_words(v: Any, env: Mapping[str, str]) -> list[str]:
    """`command` / `args` with Kubernetes' own $(VAR) references replaced from the env (a value
    that is a reference to elsewhere, `<fieldRef:...>`, stays a reference)."""

    def sub(s: str) -> str:
        return _K8S_REF.sub(
            lambda m: (
                env.get(m.group(1), m.group(0)) if not env.get(m.group(1), "").startswith("<") else m.group(0)
            ),
            s,
        )

    if isinstance(v, str):
        return [sub(v)]
    return [sub(scalar(x)) for x in v] if isinstance(v, list) else []


def _pod_path(names: list[str], kind: str) -> str:
    """The container's name: the resource, then the last two names on the way that are not
    structural keys (`decode/vllm`)."""
    own: list[str] = []
    for n in names:
        if n and n not in _STRUCTURAL and n not in own:
            own.append(n)
    return "/".join(own[:1] + own[1:][-2:]) or kind


def _start(
    cmd: list[str],
    args: list[str],
    env: dict[str, str],
    image: str,
    variables: Mapping[str, str],
    *,
    kind: str,
    net: str | None,
    ev: str,
) -> list[Found]:
    """The servers a container's command + args start (the image's entrypoint when no command)."""
    launcher = f"{kind} > "
    if cmd:
        return run_argv(cmd + args, env, variables, network=net, evidence=ev, launcher=launcher)
    if len(args) == 1 and " " in args[0].strip():  # a shell line run by the image's sh -c
        return run_argv(["sh", "-c", args[0]], env, variables, network=net, evidence=ev, launcher=launcher)
    if args and not args[0].startswith("-"):  # an argv the image runs (a shim's too): if it starts vLLM
        got = run_argv(args, env, variables, network=net, evidence=ev, launcher=launcher)
        if got or args[0].rsplit("/", 1)[-1] in ("vllm", "python", "python3", "sh", "bash"):
            return got
    if args and ("vllm" in image.lower() or any(a.startswith("--kv-transfer-config") for a in args)):
        return [Found(args, env, f"{kind} > image entrypoint (vllm serve)", network=net, network_evidence=ev)]
    return []


def _role_from_names(f: Found, names: list[str], svc: dict[str, Any] | None) -> None:
    """A Dynamo `subComponentType`, else a hint from the names on the way (the nearest first)."""
    st = str((svc or {}).get("subComponentType", "")).lower()
    if f.role is None and st in ROLES:
        f.role, f.role_source = st, f"subComponentType: {st}"
    if f.role is None:
        for n in reversed(names):
            r = role_from_name(n)
            if r:
                f.notes.append(f"name-role:{r}:resource name {n}")
                break
