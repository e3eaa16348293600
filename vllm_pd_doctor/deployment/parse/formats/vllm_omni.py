"""vLLM-Omni stage configs (`stage_args:`): a pipeline of engines, one per stage, started by
vLLM-Omni's orchestrator (`vllm serve MODEL --omni --stage-configs-path FILE`).

A stage with `is_prefill_only: true` is a P/D prefill engine, one with `is_decode_only: true` its
decode engine; their `engine_args` are vLLM engine arguments (a `kv_transfer_config` among them),
read as `--config` flags are. Keys vLLM-Omni adds (`model_stage`, `worker_type`, `scheduler_cls`...)
are no flag of any vLLM release pd-doctor knows and are left out (named in the server's notes).
Other stages (a talker, a vocoder) are shown as pipeline stages and not checked as P/D servers. The
model is given on the command line, not in the file (`--set MODEL=...` is not needed: it stays
unknown). All stages run on one machine, on the devices of `runtime.devices`.
Example: vllm-project/vllm-omni vllm_omni/model_executor/stage_configs/qwen3_omni_moe_pd_separation.yaml.
"""

from __future__ import annotations

from typing import Any

from vllm_pd_doctor.deployment.parse.found import Found
from vllm_pd_doctor.deployment.parse.manifests import config_args
from vllm_pd_doctor.deployment.parse.registry import DeploymentFormat, Source
from vllm_pd_doctor.knowledge.readers.serve_flags import BUILTIN

_ROLE_KEYS = (("is_prefill_only", "prefill"), ("is_decode_only", "decode"))


def sniff(src: Source) -> bool:
    d = src.single()
    return d is not None and isinstance(d.get("stage_args"), list)


def read(src: Source) -> list[Found] | None:
    d = src.single() or {}
    out: list[Found] = []
    for i, stage in enumerate(d["stage_args"]):
        if not isinstance(stage, dict):
            continue
        sid = stage.get("stage_id", i)
        eargs = _mapping(stage.get("engine_args"))
        role = next((r for key, r in _ROLE_KEYS if stage.get(key) is True), None)
        name = f"stage-{sid}" + (f"-{eargs['model_stage']}" if eargs.get("model_stage") else "")
        if role is None and not eargs.get("kv_transfer_config"):
            src.others.append(
                f"{name}: a vLLM-Omni pipeline stage ({stage.get('stage_type', '?')}) without a KV "
                "connector: not a P/D engine"
            )
            continue
        out.append(_stage(stage, eargs, role, name))
    return out if out or src.others else None


def _mapping(v: Any) -> dict[str, Any]:
    return {str(k): x for k, x in v.items()} if isinstance(v, dict) else {}


def _stage(stage: dict[str, Any], eargs: dict[str, Any], role: str | None, name: str) -> Found:
    vllm_args = {k: v for k, v in eargs.items() if BUILTIN.known(str(k).replace("_", "-"))}
    dropped = sorted(str(k) for k in eargs if k not in vllm_args)
    runtime = _mapping(stage.get("runtime"))
    env = {"CUDA_VISIBLE_DEVICES": str(runtime["devices"])} if runtime.get("devices") is not None else {}
    f = Found(
        config_args(vllm_args),
        env,
        "vllm-omni stage config",
        name=name,
        network="host:vllm-omni",
        network_evidence="vLLM-Omni's orchestrator starts every stage on its own machine",
    )
    if role is not None:
        f.role, f.role_source = role, f"is_{role}_only: true"
    if dropped:
        f.notes.append("vLLM-Omni's own engine args, not checked: " + ", ".join(dropped))
    return f


FORMAT = DeploymentFormat("vllm-omni-stage-config", sniff, read)
