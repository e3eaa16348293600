"""The end of the document formats: a JSON or .yaml/.yml input none of them read is refused here
(it is not read as shell text), naming what was expected."""

from __future__ import annotations

from vllm_pd_doctor.deployment.parse.found import Found
from vllm_pd_doctor.deployment.parse.registry import DeploymentFormat, Source
from vllm_pd_doctor.infra.errors import BadInput


def sniff(src: Source) -> bool:
    return src.is_json or src.is_yaml_file


def read(src: Source) -> list[Found]:
    if src.is_json:
        raise BadInput(
            f"{src.label}: expected a mapping with prefill: and decode: entries, "
            f"got {type(src.docs[0]).__name__}"
        )
    raise BadInput(f"{src.label}: YAML without prefill: / decode: entries or containers")


FORMAT = DeploymentFormat("unread-documents", sniff, read)
