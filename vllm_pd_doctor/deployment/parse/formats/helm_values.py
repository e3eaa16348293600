"""Helm values files, read as their chart renders the engine command (nothing is rendered):

- vLLM production-stack: `servingEngineSpec.modelSpec[]`, each a Deployment running
  `vllm serve MODEL_URL --host 0.0.0.0 --port PORT` + the `vllmConfig` flags + `extraArgs` + the
  kv-transfer-config its `lmcacheConfig` makes (helm/templates/deployment-vllm-multi.yaml).
- llm-d-modelservice: `prefill:` / `decode:` with `containers[]`; `modelCommand: vllmServe` runs
  `vllm serve MODEL --port PORT [--tensor-parallel-size/--data-parallel-size...] --served-model-name
  NAME ARGS` (MODEL from `modelArtifacts.uri`; decode listens on `routing.proxy.targetPort` behind
  the routing sidecar, prefill on `routing.servicePort`), `imageDefault` the same arguments to the
  image's entrypoint, `custom` its own `command` + `args` (templates/_helpers.tpl).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from vllm_pd_doctor.deployment.parse.found import Found
from vllm_pd_doctor.deployment.parse.manifests import env_map, role_from_name
from vllm_pd_doctor.deployment.parse.registry import DeploymentFormat, Source
from vllm_pd_doctor.deployment.parse.symbolic import Interp
from vllm_pd_doctor.knowledge.facts.connectors import LMCACHE_CONNECTORS


def _prodstack_values(d: Any) -> bool:
    return isinstance(d, dict) and isinstance(d.get("servingEngineSpec"), Mapping)


def _modelservice_values(d: Any) -> bool:
    return (
        isinstance(d, dict)
        and not _prodstack_values(d)
        and isinstance(d.get("modelArtifacts"), Mapping)
        and any(
            isinstance(d.get(r), Mapping) and isinstance(d[r].get("containers"), list)
            for r in ("prefill", "decode")
        )
    )


def _read_prodstack(src: Source) -> list[Found]:
    return [f for d in src.docs if _prodstack_values(d) for f in _prodstack(d["servingEngineSpec"])]


def _read_modelservice(src: Source) -> list[Found]:
    return [f for d in src.docs if _modelservice_values(d) for f in _modelservice(d, src.variables)]


PRODUCTION_STACK = DeploymentFormat(
    "production-stack-helm-values", lambda src: any(map(_prodstack_values, src.docs)), _read_prodstack
)
MODELSERVICE = DeploymentFormat(
    "llm-d-modelservice-helm-values",
    lambda src: any(map(_modelservice_values, src.docs)),
    _read_modelservice,
)


_PS_FLAGS = (
    ("maxModelLen", "--max-model-len"),
    ("dtype", "--dtype"),
    ("tensorParallelSize", "--tensor-parallel-size"),
    ("maxNumSeqs", "--max-num-seqs"),
    ("gpuMemoryUtilization", "--gpu-memory-utilization"),
    ("maxLoras", "--max-loras"),
)


def _prodstack(engine: Mapping[str, Any]) -> list[Found]:
    out: list[Found] = []
    port = str(engine.get("containerPort", 8000))
    for ms in engine.get("modelSpec") or []:
        if not isinstance(ms, dict):
            continue
        name = str(ms.get("name", "model"))
        args = [str(ms.get("modelURL", "")), "--host", "0.0.0.0", "--port", port]
        vc = ms.get("vllmConfig") if isinstance(ms.get("vllmConfig"), dict) else None
        if vc is not None:
            if "enableChunkedPrefill" in vc:
                on = vc["enableChunkedPrefill"]
                args.append("--enable-chunked-prefill" if on else "--no-enable-chunked-prefill")
            # the chart writes one or the other, always: no key means --no-enable-prefix-caching
            pc = vc.get("enablePrefixCaching")
            args.append("--enable-prefix-caching" if pc else "--no-enable-prefix-caching")
            for key, flag in _PS_FLAGS:
                if key in vc:
                    args += [flag, str(vc[key])]
            args += [str(a) for a in vc.get("extraArgs") or []]
        env: dict[str, str] = {}
        lc = ms.get("lmcacheConfig") if isinstance(ms.get("lmcacheConfig"), dict) else None
        if lc and lc.get("enabled"):
            role = str(lc.get("kvRole") or "kv_both")
            ktc: dict[str, Any] = {"kv_connector": LMCACHE_CONNECTORS["v1"], "kv_role": role}
            if "enablePD" in lc:
                ktc["kv_connector_extra_config"] = {
                    "discard_partial_chunks": False,
                    "lmcache_rpc_port": str(lc.get("nixlRole", "")),
                }
            elif vc is not None and str(vc.get("v0", "")) == "1":
                ktc = {"kv_connector": LMCACHE_CONNECTORS["v0"], "kv_role": role}
            args += ["--kv-transfer-config", json.dumps(ktc)]
            env.update({"LMCACHE_USE_EXPERIMENTAL": "True", "VLLM_RPC_TIMEOUT": "1000000"})
            if lc.get("enablePD"):
                env.update({"UCX_TLS": "cuda_ipc,cuda_copy,tcp", "LMCACHE_LOCAL_CPU": "False"})
            if "enableNixl" in lc:
                env["LMCACHE_ENABLE_NIXL"] = "True" if lc["enableNixl"] else "False"
        env.update(env_map(ms.get("env"), f"modelSpec {name} env"))
        image = f"{ms['repository']}:{ms.get('tag', 'latest')}" if ms.get("repository") else None
        f = Found(
            args,
            env,
            "production-stack modelSpec > vllm serve",
            network=f"pod:{name}",
            network_evidence=f"production-stack modelSpec {name}: its own Deployment's pods",
            name=name,
            image=image,
        )
        r = role_from_name(name)
        if r:
            f.notes.append(f"name-role:{r}:modelSpec name {name}")
        out.append(f)
    return out


# --- llm-d-modelservice -----------------------------------------------------------------------


def _map(d: Mapping[str, Any], key: str) -> dict[str, Any]:
    v = d.get(key)
    return dict(v) if isinstance(v, Mapping) else {}


def _model_arg(artifacts: Mapping[str, Any]) -> str:
    uri = str(artifacts.get("uri", ""))
    proto, _, rest = uri.partition("://")
    mount = str(artifacts.get("mountPath") or "/model-cache")
    if proto == "pvc":
        return f"{mount}/{rest.split('/', 1)[1] if '/' in rest else ''}"
    if proto == "pvc+hf":
        parts = rest.split("/")
        return "/".join(parts[-2:])
    return rest or uri


def _count(par: Mapping[str, Any]) -> tuple[int, int, int]:
    """(tensor, data, data-local) as the chart derives them."""
    tp = int(par.get("tensor") or 1)
    workers = int(par.get("workers") or 0)
    data, local = int(par.get("data") or 0), int(par.get("dataLocal") or 0)
    dp = data or (local * workers if local and workers else local) or 1
    dpl = local or (data // workers if data and workers else data) or 1
    return tp, dp, dpl


def _image(img: Any) -> str | None:
    if isinstance(img, str):
        return img or None
    if isinstance(img, Mapping) and img.get("repository"):
        reg = f"{img['registry']}/" if img.get("registry") else ""
        return f"{reg}{img['repository']}:{img.get('tag', 'latest')}"
    return None


def _modelservice(d: Mapping[str, Any], variables: Mapping[str, str]) -> list[Found]:
    art = d["modelArtifacts"]
    routing = _map(d, "routing")
    proxy = _map(routing, "proxy")
    out: list[Found] = []
    for role in ("prefill", "decode"):
        spec = d.get(role)
        if not isinstance(spec, Mapping) or spec.get("create") is False:
            continue
        par = _map(spec, "parallelism")
        tp, dp, dpl = _count(par)
        behind_proxy = role == "decode" and proxy.get("enabled") is not False
        port = str(proxy.get("targetPort", 8200) if behind_proxy else routing.get("servicePort", 8000))
        flags = ["--port", port]
        for n, flag in (
            (tp, "--tensor-parallel-size"),
            (dp, "--data-parallel-size"),
            (dpl, "--data-parallel-size-local"),
        ):
            if n > 1:
                flags += [flag, str(n)]
        flags += ["--served-model-name", str(art.get("name", ""))]
        for c in spec.get("containers") or []:
            if isinstance(c, Mapping):
                out.extend(_ms_container(c, role, flags, _model_arg(art), d, variables))
    return out


def _ms_container(
    c: Mapping[str, Any],
    role: str,
    flags: list[str],
    model: str,
    d: Mapping[str, Any],
    variables: Mapping[str, str],
) -> list[Found]:
    env = env_map(c.get("env"), f"{role} container env")
    args = [str(a) for a in c.get("args") or []]
    mode = str(c.get("modelCommand") or "custom")
    if mode == "vllmServe":
        argv = ["vllm", "serve", model, *flags, *args]
    elif mode == "imageDefault":
        argv = ["vllm", "serve", "--model", model, *flags, *args]
    else:
        argv = [str(x) for x in c.get("command") or []] + args
    it = Interp({**env, **variables}, pinned=variables)
    it.exported |= set(env)
    it.ctx[0].env = dict(env)
    it.ctx[0].launcher = f"llm-d-modelservice {role} ({mode}) > "
    name = f"{d.get('fullnameOverride') or 'modelservice'}-{role}"
    it.ctx[0].network, it.ctx[0].network_evidence = f"pod:{name}", f"llm-d-modelservice {role} pods"
    if argv:
        it._launch(argv, {}, " ".join(argv))
    for f in it.found:
        f.role, f.role_source = role, f"llm-d-modelservice {role}:"
        f.name, f.image = name, _image(c.get("image"))
    return it.found
