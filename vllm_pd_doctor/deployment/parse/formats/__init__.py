"""Every deployment format pd-doctor reads, in the order the loader tries them (`registry.walk`).

The document formats come first (they look at the input's JSON/YAML documents, most specific
first: a controller's own kind before the generic Kubernetes walk), then the refusal of a
JSON/YAML file none of them read, then the text formats. A new format is one module with a
`DeploymentFormat` and one line here, plus a corpus pair (fixture + `.expect.yaml`) in
tests/fixtures/check_config/corpus.
"""

from __future__ import annotations

from vllm_pd_doctor.deployment.parse.formats import (
    compose,
    dynamo_graph,
    helm_values,
    kserve,
    kubernetes,
    markdown,
    pd_mapping,
    python_file,
    ray_serve,
    rolebasedgroup,
    shell,
    unread_documents,
    vllm_config,
    vllm_omni,
    vllm_recipe,
)
from vllm_pd_doctor.deployment.parse.registry import DeploymentFormat

DOCUMENT_FORMATS: tuple[DeploymentFormat, ...] = (
    kserve.FORMAT,
    helm_values.PRODUCTION_STACK,
    helm_values.MODELSERVICE,
    ray_serve.FORMAT,
    vllm_recipe.FORMAT,
    vllm_omni.FORMAT,
    pd_mapping.FORMAT,
    compose.FORMAT,
    vllm_config.FORMAT,
    rolebasedgroup.FORMAT,
    dynamo_graph.FORMAT,
    kubernetes.FORMAT,
)
"""Formats read from the input's documents (also a Markdown page's yaml blocks)."""

FORMATS: tuple[DeploymentFormat, ...] = (
    *DOCUMENT_FORMATS,
    unread_documents.FORMAT,
    python_file.FORMAT,
    markdown.FORMAT,
    shell.FORMAT,
)
"""Every format, in the order the loader tries them."""

__all__ = ["DOCUMENT_FORMATS", "FORMATS"]
