"""What the YAML/JSON formats share: Kubernetes-style resources of any kind (Pod, Deployment,
StatefulSet, LeaderWorkerSet, llm-d, Dynamo DynamoGraphDeployment, kthena ModelServing, ...) are
walked and every container (`command` + `args` + `env`) under them is looked at (`walk_docs`);
names on the way (service, role, container) and `subComponentType` give the roles. Also: env
lists, vLLM `--config` mappings as flags, the strategic merge controllers apply to templates.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from vllm_pd_doctor.deployment.parse import k8s_env
from vllm_pd_doctor.deployment.parse.symbolic import Interp
from vllm_pd_doctor.deployment.parse.wrappers import Found
from vllm_pd_doctor.infra.errors import BadInput
from vllm_pd_doctor.knowledge.readers.serve_flags import FLAGS

ROLES = ("prefill", "decode")
_NAMES = """spec template containers initContainers extraPodSpec mainContainer services roles
entryTemplate workerTemplate leaderTemplate leaderWorkerTemplate backend workers predictor decoder
worker standalonePattern leaderWorkerPattern customComponentsPattern patch templateRef roleTemplates
podTemplate components"""
_STRUCTURAL = set(_NAMES.split())


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


@dataclass
class _Walk:
    """What every container of one input shares: --set values, the ConfigMaps and Secrets of the
    files, and the containers that start no engine (collected for the output)."""

    variables: Mapping[str, str]
    resources: k8s_env.Resources
    others: list[str] = field(default_factory=list)


def walk_docs(
    docs: list[Any], variables: Mapping[str, str], others: list[str] | None = None
) -> list[Found] | None:
    """Every container under these resources that starts vLLM; None when a document is neither a
    mapping nor a list (not resources)."""
    docs = [d for d in docs if d is not None]
    if not docs or not all(isinstance(d, (dict, list)) for d in docs):
        return None
    out: list[Found] = []
    w = _Walk(variables, k8s_env.Resources.of(docs), others if others is not None else [])
    for d in docs:
        meta = d.get("metadata") if isinstance(d, dict) else None
        top = str(meta.get("name", "")) if isinstance(meta, dict) else ""
        kind = str(d.get("kind", "")) if isinstance(d, dict) else ""
        _walk(d, [top] if top else [], kind or "resource", top, False, out, w)
    return out


def _walk(
    obj: Any,
    names: list[str],
    kind: str,
    top: str,
    host_net: bool,
    out: list[Found],
    w: _Walk,
    svc: dict[str, Any] | None = None,
) -> None:
    if isinstance(obj, list):
        for item in obj:
            _walk(item, names, kind, top, host_net, out, w, svc)
        return
    if not isinstance(obj, dict):
        return
    host_net = host_net or obj.get("hostNetwork") is True
    cfg = obj.get("config")
    if isinstance(cfg, dict) and not _is_container(obj) and is_vllm_config(cfg):
        obj = {**obj, "args": config_args(cfg)}
        obj.pop("config")
    if _is_container(obj):
        _container(obj, names, kind, top, host_net, out, w, svc)
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
                _walk(item, [*names, str(k)] + ([n2] if n2 else []), kind, top, host_net, out, w, svc)
        else:
            _walk(v, sub, kind, top, host_net, out, w, svc)


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
    w: _Walk,
    svc: dict[str, Any] | None,
) -> None:
    outer = svc.get("envs") or svc.get("env") if svc is not None else None
    if isinstance(outer, list) and isinstance(c.get("env") or [], list):
        # a controller's service-level env (Dynamo `envs:`) goes into the container before its own
        c = {**c, "env": [*outer, *(c.get("env") or [])]}
    kenv = k8s_env.container_env(c, w.resources, w.variables)
    env = kenv.process_env()
    if outer and not isinstance(outer, list):
        env = {**env_map(outer, f"{kind} {top}"), **env}
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
    look = kenv.lookup(w.variables)
    cmd, args = _k8s_words(c.get("command"), look), _k8s_words(c.get("args"), look)
    got = _start(cmd, args, env, image, w.variables, kind=kind, net=net, ev=ev)
    if not got:
        w.others.append(f"{path}: {_what(cmd + args, image, names)}")
    used = scalar(c.get("command")) + " " + scalar(c.get("args"))
    for f in got:
        f.name, f.image = path, image or None
        _role_from_names(f, names, svc)
        for var, origin in sorted(kenv.unknown.items()):
            if f"$({var})" in used:
                f.notes.append(f"k8s-unknown:{var}:{origin}")
        out.append(f)


def _what(argv: list[str], image: str, names: list[str]) -> str:
    """What a container that starts no vLLM engine runs, in a few words."""
    words = [a for a in argv if a]
    if words[:1] == ["-m"]:
        words = ["python", *words]
    if len(words) >= 3 and words[0].rsplit("/", 1)[-1].startswith("python") and words[1] == "-m":
        shown = " ".join(words[:3])
    elif words and words[0] in ("sh", "bash", "/bin/sh", "/bin/bash") and len(words) > 2:
        shown = f"{words[0]} {words[1]} {words[2][:60]!r}"
    else:
        shown = " ".join(words[:3]) or f"image {image}"
    init = " (init container)" if "initContainers" in names else ""
    return f"{shown}{init}: not a vLLM engine"


def _k8s_words(v: Any, look: Callable[[str], str | None]) -> list[str]:
    """`command` / `args` with Kubernetes' own $(VAR) references expanded as the kubelet does."""
    if isinstance(v, str):
        return [k8s_env.expand(v, look)]
    return [k8s_env.expand(scalar(x), look) for x in v] if isinstance(v, list) else []


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
    if len(args) >= 2 and args[0] == "-m":  # the image's python runs a module: an engine only if vLLM's
        return run_argv(["python3", *args], env, variables, network=net, evidence=ev, launcher=launcher)
    if args and (_vllm_entrypoint(image) or any(a.startswith("--kv-transfer-config") for a in args)):
        return [Found(args, env, f"{kind} > image entrypoint (vllm serve)", network=net, network_evidence=ev)]
    return []


def _vllm_entrypoint(image: str) -> bool:
    """An image whose entrypoint is `vllm serve` (vLLM's own `vllm/vllm-openai` and its builds), not
    a platform runtime that only contains vLLM (Dynamo's `ai-dynamo/vllm-runtime`: its entrypoint
    runs whatever the args say)."""
    low = image.lower()
    return "vllm" in low and "dynamo" not in low and "runtime" not in low


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
