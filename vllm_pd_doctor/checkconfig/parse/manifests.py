"""YAML/JSON inputs -> the vLLM servers they start.

Our own `prefill:`/`decode:` mapping, docker compose `services:`, and Kubernetes-style resources of
any kind (Pod, Deployment, StatefulSet, LeaderWorkerSet, llm-d, Dynamo DynamoGraphDeployment,
kthena ModelServing, KServe ...): every container (`command` + `args` + `env`) under them is
looked at; names on the way (service, role, container) and `subComponentType` give the roles.
"""

from __future__ import annotations

import json
import re
import shlex
from collections.abc import Mapping
from typing import Any

from vllm_pd_doctor.checkconfig.parse.shell import Interp
from vllm_pd_doctor.checkconfig.parse.shellexpand import Scope, expand_dquoted
from vllm_pd_doctor.checkconfig.parse.wrappers import Found
from vllm_pd_doctor.errors import BadInput
from vllm_pd_doctor.knowledge.serve_flags import FLAGS

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


def from_docs(docs: list[Any], label: str, variables: Mapping[str, str]) -> list[Found] | None:
    """The servers in parsed YAML/JSON documents; None when they are not one of our formats."""
    docs = [d for d in docs if d is not None]
    if len(docs) == 1 and isinstance(docs[0], dict):
        d = docs[0]
        if isinstance(d.get("roles"), dict):
            d = d["roles"]
        if any(k in d for k in ROLES) and "kind" not in d and "services" not in d:
            return _from_mapping(d, label, variables)
        if isinstance(d.get("services"), dict) and "apiVersion" not in d:
            return _compose(d["services"], label, variables)
        if _is_vllm_config(d):
            return [Found(config_args(d), {}, "vllm serve --config", name="server")]
    if not docs or not all(isinstance(d, (dict, list)) for d in docs):
        return None
    out: list[Found] = []
    for d in docs:
        meta = d.get("metadata") if isinstance(d, dict) else None
        top = str(meta.get("name", "")) if isinstance(meta, dict) else ""
        kind = str(d.get("kind", "")) if isinstance(d, dict) else ""
        _walk(d, [top] if top else [], kind or "resource", top, False, out, variables)
    return out


def _is_vllm_config(d: dict[str, Any]) -> bool:
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


# --- our mapping format ----------------------------------------------------------------------


def _from_mapping(doc: dict[str, Any], label: str, variables: Mapping[str, str]) -> list[Found]:
    out: list[Found] = []
    for key, entry in doc.items():
        role = role_from_name(str(key)) if str(key).lower() not in ROLES else str(key).lower()
        if role is None or entry is None:
            continue
        entries = (
            entry
            if isinstance(entry, list) and entry and all(isinstance(e, dict) for e in entry)
            else [entry]
        )
        for k, e in enumerate(entries):
            f = _entry(e, role, f"{label} ({key})", variables)
            f.role, f.role_source = role, f"{key}: entry"
            f.name = str(key) if len(entries) == 1 else f"{key}-{k}"
            out.append(f)
    if not out:
        raise BadInput(
            f"{label}: no prefill: or decode: entry",
            hint="write prefill: {args: [...], env: {...}} and decode: {...}",
        )
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


def _run(
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


def _entry(entry: Any, role: str, what: str, variables: Mapping[str, str]) -> Found:
    if isinstance(entry, str):
        found = _run_text(entry, variables)
        if not found:
            raise BadInput(
                f"{what}: not a vLLM server command ({entry.strip()[:40]!r})",
                hint="use `vllm serve MODEL ...` or `python -m "
                "vllm.entrypoints.openai.api_server --model MODEL ...`",
            )
        return found[0]
    if isinstance(entry, list):
        entry = {"args": entry}
    if not isinstance(entry, dict):
        raise BadInput(
            f"{what}: expected a command string or a mapping with args/env, got {type(entry).__name__}"
        )
    env = env_map(entry.get("env"), what)
    cmd = entry.get("command", entry.get("cmd"))
    raw_args = entry.get("args", [])
    if isinstance(raw_args, str):
        try:
            extra = shlex.split(raw_args)
        except ValueError as exc:
            raise BadInput(f"{what}: cannot split the arguments ({exc})") from None
    elif isinstance(raw_args, list):
        extra = [scalar(a) for a in raw_args]
    else:
        raise BadInput(f"{what}: args must be a list or a string")
    f: Found | None = None
    if isinstance(cmd, str) and cmd.strip():
        got = _run_text(cmd, {**variables, **env})
        f = got[0] if got else None
        if f is None:
            raise BadInput(f"{what}: not a vLLM server command ({cmd.strip()[:40]!r})")
        f.args = f.args + extra
        f.env = {**f.env, **env}
    elif isinstance(cmd, list) and cmd:
        got = _run([scalar(c) for c in cmd] + extra, env, variables)
        if not got:
            raise BadInput(f"{what}: not a vLLM server command ({' '.join(map(str, cmd[:3]))!r})")
        f = got[0]
    elif extra and (extra[0].rsplit("/", 1)[-1] in ("vllm", "python", "python3")):
        got = _run(extra, env, variables)
        if not got:
            raise BadInput(f"{what}: not a vLLM server command ({' '.join(extra[:3])!r})")
        f = got[0]
    else:
        f = Found(extra[1:] if extra[:1] == ["serve"] else extra, env, "args")
    if not f.args and "model" not in entry:
        raise BadInput(f"{what}: empty command (no args)")
    if entry.get("model") is not None:
        f.args = [*f.args, "--model", scalar(entry["model"])]
    host = entry.get("host") or entry.get("node")
    if host is not None:
        f.network, f.network_evidence = f"host:{scalar(host)}", "host: entry"
        f.name = scalar(host)
    return f


def _run_text(text: str, variables: Mapping[str, str]) -> list[Found]:
    it = Interp(variables)
    it.run_text(text)
    return it.found


# --- docker compose -------------------------------------------------------------------------


def _words(v: Any, what: str) -> list[str]:
    """compose `command:` / `entrypoint:`: a string is split shell-like (not run by a shell)."""
    if isinstance(v, str):
        try:
            return shlex.split(v)
        except ValueError as exc:
            raise BadInput(f"{what}: cannot split ({exc})") from None
    return [scalar(x) for x in v] if isinstance(v, list) else []


def _compose(services: dict[str, Any], label: str, variables: Mapping[str, str]) -> list[Found]:
    sc = Scope(vars=dict(variables))
    out: list[Found] = []

    def interp(v: Any) -> Any:
        if isinstance(v, str):
            return expand_dquoted(v.replace("$$", "\x00"), sc).replace("\x00", "$")
        if isinstance(v, list):
            return [interp(x) for x in v]
        if isinstance(v, dict):
            return {k: interp(x) for k, x in v.items()}
        return v

    for name, svc in services.items():
        if not isinstance(svc, dict):
            continue
        svc = interp(svc)
        image = str(svc.get("image", ""))
        env = env_map(svc.get("environment"), f"{label} (service {name})")

        what = f"{label} (service {name})"
        entry, cmd = _words(svc.get("entrypoint"), what), _words(svc.get("command"), what)
        host_net = svc.get("network_mode") == "host"
        net = None if host_net else f"container:{svc.get('container_name') or name}"
        ev = "compose network_mode: host" if host_net else f"compose service {name}: own network namespace"
        if entry:
            found = _run(entry + cmd, env, variables, network=net, evidence=ev, launcher="compose > ")
        elif (
            cmd
            and not cmd[0].startswith("-")
            and ("vllm" in cmd[0] or "python" in cmd[0] or cmd[0] in ("sh", "bash"))
        ):
            found = _run(cmd, env, variables, network=net, evidence=ev, launcher="compose > ")
        elif "vllm" in image.lower() and (cmd or svc.get("command") is not None):
            found = [
                Found(
                    cmd,
                    env,
                    f"compose > {image} (image entrypoint vllm serve)",
                    network=net,
                    network_evidence=ev,
                )
            ]
        else:
            found = []
        for f in found:
            f.name, f.image = str(name), image or None
            r = role_from_name(str(name))
            if r and f.role is None:
                f.notes.append(f"name-role:{r}:compose service name {name}")
            out.append(f)
    return out


# --- Kubernetes-style resources ---------------------------------------------------------------


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
    if isinstance(cfg, dict) and not _is_container(obj) and _is_vllm_config(cfg):
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

    def sub(s: str) -> str:  # Kubernetes' own $(VAR) references
        return _K8S_REF.sub(
            lambda m: (
                env.get(m.group(1), m.group(0)) if not env.get(m.group(1), "").startswith("<") else m.group(0)
            ),
            s,
        )

    def words(v: Any) -> list[str]:
        if isinstance(v, str):
            return [sub(v)]
        return [sub(scalar(x)) for x in v] if isinstance(v, list) else []

    cmd, args = words(c.get("command")), words(c.get("args"))
    own: list[str] = []
    for n in names:
        if n and n not in _STRUCTURAL and n not in own:
            own.append(n)
    path = "/".join(own[:1] + own[1:][-2:]) or kind
    net = None if host_net else f"pod:{path}"
    ev = (
        "hostNetwork: true (the node's network)"
        if host_net
        else f"Kubernetes {kind} {path}: its own pod network namespace"
    )
    image = str(c.get("image", ""))
    if cmd:
        found = _run(cmd + args, env, variables, network=net, evidence=ev, launcher=f"{kind} > ")
    elif len(args) == 1 and " " in args[0].strip():  # a shell line run by the image's sh -c
        found = _run(["sh", "-c", args[0]], env, variables, network=net, evidence=ev, launcher=f"{kind} > ")
    elif args and args[0].rsplit("/", 1)[-1] in ("vllm", "python", "python3", "sh", "bash"):
        found = _run(args, env, variables, network=net, evidence=ev, launcher=f"{kind} > ")
    elif args and ("vllm" in image.lower() or any(a.startswith("--kv-transfer-config") for a in args)):
        found = [
            Found(args, env, f"{kind} > image entrypoint (vllm serve)", network=net, network_evidence=ev)
        ]
    else:
        found = []
    for f in found:
        f.name, f.image = path, image or None
        st = str((svc or {}).get("subComponentType", "")).lower()
        if f.role is None and st in ROLES:
            f.role, f.role_source = st, f"subComponentType: {st}"
        if f.role is None:
            for n in reversed(names):
                r = role_from_name(n)
                if r:
                    f.notes.append(f"name-role:{r}:resource name {n}")
                    break
        out.append(f)
