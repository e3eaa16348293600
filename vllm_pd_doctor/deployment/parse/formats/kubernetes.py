"""Kubernetes-style resources of any kind (Pod, Deployment, StatefulSet, LeaderWorkerSet, llm-d,
kthena ModelServing, AIBrix StormService ...): every container under them that starts vLLM
(`manifests.walk_docs`). Also a JSON/YAML list of such resources."""

from __future__ import annotations

from vllm_pd_doctor.deployment.parse.found import Found
from vllm_pd_doctor.deployment.parse.manifests import walk_docs
from vllm_pd_doctor.deployment.parse.registry import DeploymentFormat, Source


def sniff(src: Source) -> bool:
    return bool(src.docs)


def read(src: Source) -> list[Found] | None:
    docs = [d for d in src.docs if not (isinstance(d, dict) and d.get("kind") == "LLMInferenceServiceConfig")]
    return walk_docs(docs, src.variables, src.others)


FORMAT = DeploymentFormat("kubernetes-manifests", sniff, read)
