"""NVIDIA Dynamo `DynamoGraphDeployment`: its services' `extraPodSpec.mainContainer` run
`python3 -m dynamo.vllm ...` (read by `parse.dynamo` as the vLLM engine it starts); a service's
`subComponentType: prefill|decode` gives the role, its `envs` the environment."""

from __future__ import annotations

from vllm_pd_doctor.deployment.parse.found import Found
from vllm_pd_doctor.deployment.parse.manifests import walk_docs
from vllm_pd_doctor.deployment.parse.registry import DeploymentFormat, Source

KIND = "DynamoGraphDeployment"


def sniff(src: Source) -> bool:
    return KIND in src.kinds()


def read(src: Source) -> list[Found] | None:
    return walk_docs(src.docs, src.variables, src.others)


FORMAT = DeploymentFormat("dynamo-graph-deployment", sniff, read)
