"""KServe `LLMInferenceService` (serving.kserve.io), read as its controller builds the pods.

`spec.template` is the decode (main) pool, `spec.prefill.template` the prefill pool; the
controller's template runs `vllm serve /mnt/models --served-model-name NAME --port 8000
$VLLM_ADDITIONAL_ARGS "$@"` (kserve config/llmisvcconfig/config-llm-*template.yaml), the
container's `args` being `$@`. `spec.parallelism` gives the TP/DP flags; a container with its own
`command` replaces it. `baseRefs` are merged from the LLMInferenceServiceConfig documents in the
same file (a controller default, `kserve-config-llm-*`, needs none).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from vllm_pd_doctor.deployment.parse.found import Found
from vllm_pd_doctor.deployment.parse.manifests import env_map, merge
from vllm_pd_doctor.deployment.parse.registry import DeploymentFormat, Source
from vllm_pd_doctor.deployment.parse.symbolic import Interp
from vllm_pd_doctor.infra.errors import BadInput

KIND = "LLMInferenceService"
KSERVE_SCRIPT = (
    'eval "exec vllm serve /mnt/models --served-model-name ${__PDD_NAME} --port 8000 '
    '${VLLM_ADDITIONAL_ARGS} $@"'
)
_PARALLEL = (
    ("tensor", "--tensor-parallel-size"),
    ("pipeline", "--pipeline-parallel-size"),
    ("data", "--data-parallel-size"),
    ("dataLocal", "--data-parallel-size-local"),
)


def sniff(src: Source) -> bool:
    return KIND in src.kinds()


def read(src: Source) -> list[Found]:
    configs = {
        str(_map(d, "metadata").get("name", "")): d.get("spec") or {}
        for d in src.docs
        if isinstance(d, dict) and d.get("kind") == "LLMInferenceServiceConfig"
    }
    out: list[Found] = []
    for d in src.docs:
        if isinstance(d, dict) and d.get("kind") == KIND and isinstance(d.get("spec"), dict):
            spec, missing = _with_base_refs(d["spec"], configs)
            out.extend(_service({**d, "spec": spec}, missing, src))
    return out


FORMAT = DeploymentFormat("kserve-llminferenceservice", sniff, read)


def _with_base_refs(spec: dict[str, Any], configs: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """The spec with its `baseRefs` merged under it, and the refs not found in the file."""
    base: Any = {}
    missing = []
    for ref in spec.get("baseRefs") or []:
        name = str(ref.get("name")) if isinstance(ref, dict) else ""
        if name in configs:
            base = merge(base, configs[name])
        elif name and not name.startswith("kserve-config-llm"):  # not a controller default
            missing.append(name)
    return merge(base, spec), missing


def _map(d: Mapping[str, Any], key: str) -> dict[str, Any]:
    v = d.get(key)
    return dict(v) if isinstance(v, Mapping) else {}


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


def _parallel_flags(par: Any) -> list[str]:
    if not isinstance(par, dict):
        return []
    out: list[str] = []
    for key, flag in _PARALLEL:
        if par.get(key) is not None:
            out += [flag, str(par[key])]
    if par.get("expert") is True:
        out.append("--enable-expert-parallel")
    return out


def _model(spec: Mapping[str, Any], name: str) -> tuple[str, str]:
    """(served model name, the model argument of `vllm serve`)."""
    model = _map(spec, "model")
    uri = str(model.get("uri", ""))
    served = str(model.get("name") or _hf_id(uri) or name)
    if uri.startswith(("hf://", "huggingface://")):
        return served, _hf_id(uri)
    if re.fullmatch(r"[\w.-]+/[\w.-]+", served):
        return served, served  # /mnt/models holds it (pvc://, s3://): named by spec.model.name
    return served, "/mnt/models"


def _pools(spec: Mapping[str, Any]) -> list[tuple[str, dict[str, Any], Any]]:
    """(role, main container, parallelism) of each pool."""
    main = _main_container(spec.get("template"))
    pre = spec.get("prefill")
    if not isinstance(pre, dict):
        return [("decode", main, spec.get("parallelism"))]
    pc = _main_container(pre.get("template")) or main
    return [
        ("prefill", pc, pre.get("parallelism", spec.get("parallelism"))),
        ("decode", main, spec.get("parallelism")),
    ]


def _service(doc: dict[str, Any], missing: list[str], src: Source) -> list[Found]:
    spec = _map(doc, "spec")
    name = str(_map(doc, "metadata").get("name", "llmisvc"))
    served, model_arg = _model(spec, name)
    out: list[Found] = []
    for role, c, par in _pools(spec):
        found = _pool(c, par, role, name, served, model_arg, src)
        if missing and not any("kv-transfer-config" in " ".join(f.args) for f in found):
            raise BadInput(
                f"{src.label}: LLMInferenceService {name} takes its pods from LLMInferenceServiceConfig "
                f"{', '.join(missing)}, which is not in this file",
                hint="append that LLMInferenceServiceConfig to the file (after a --- line)",
            )
        for f in found:
            where = "spec.prefill" if role == "prefill" else "spec.template (main pool)"
            f.role, f.role_source = role, f"LLMInferenceService {where}"
            f.name = f"{name}/{role}"
            f.image = str(c["image"]) if c.get("image") else None
            if not c.get("command"):
                f.launcher = "LLMInferenceService > controller template (vllm serve)"
            out.append(f)
    return out


def _pool(
    c: dict[str, Any], par: Any, role: str, name: str, served: str, model_arg: str, src: Source
) -> list[Found]:
    """The servers one pool's main container starts."""
    env = env_map(c.get("env"), "LLMInferenceService env")
    args = [str(a) for a in c.get("args") or []] + _parallel_flags(par)
    it = Interp({**env, **src.variables, "__PDD_NAME": served}, pinned=src.variables)
    it.exported |= set(env)
    it.ctx[0].env = dict(env)
    it.ctx[0].launcher = "LLMInferenceService > "
    it.ctx[0].network = f"pod:{name}/{role}"
    it.ctx[0].network_evidence = f"KServe LLMInferenceService {name} {role} pool: its own pods"
    if c.get("command"):
        cmd = [str(x) for x in c["command"]]
        it._launch([*cmd, *args], {}, " ".join(cmd))
    else:
        it.sc.positional = args
        it.run_text(KSERVE_SCRIPT.replace("/mnt/models", model_arg))
    return it.found
