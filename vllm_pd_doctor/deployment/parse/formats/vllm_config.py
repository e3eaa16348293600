"""vLLM's own `--config` YAML: a mapping of flags (`model:`, `kv-transfer-config:` ...), one server."""

from __future__ import annotations

from vllm_pd_doctor.deployment.parse.found import Found
from vllm_pd_doctor.deployment.parse.manifests import config_args, is_vllm_config
from vllm_pd_doctor.deployment.parse.registry import DeploymentFormat, Source


def sniff(src: Source) -> bool:
    d = src.single()
    return d is not None and is_vllm_config(d)


def read(src: Source) -> list[Found]:
    return [Found(config_args(src.single() or {}), {}, "vllm serve --config", name="server")]


FORMAT = DeploymentFormat("vllm-config-yaml", sniff, read)
