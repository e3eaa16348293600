"""A Markdown page: a runbook or guide whose shell blocks start the servers or write and apply
their manifests (`cat > F <<EOF`, `tee F <<'EOF'`, `... | kubectl apply -f -`: read as the files
they write), and ```yaml blocks (a manifest, a values file, a Serve config) whose mappings are read
by the document formats as one file of documents. The shell blocks win; a page whose blocks hold
no server is handed on to the shell format."""

from __future__ import annotations

import textwrap
from dataclasses import replace
from typing import Any

from vllm_pd_doctor.deployment.parse import bounded
from vllm_pd_doctor.deployment.parse.formats import shell
from vllm_pd_doctor.deployment.parse.found import Found
from vllm_pd_doctor.deployment.parse.registry import DeploymentFormat, Source, walk
from vllm_pd_doctor.infra.errors import BadInput


def sniff(src: Source) -> bool:
    return src.given_docs is None and (
        shell.YAML_FENCE.search(src.text) is not None or shell.FENCE.search(src.text) is not None
    )


def read(src: Source) -> list[Found] | None:
    if shell.FENCE.search(src.text):
        got = shell.read(src)
        if got is not None:
            return got
    return _yaml_blocks(src)


def _yaml_blocks(src: Source) -> list[Found] | None:
    from vllm_pd_doctor.deployment.parse.formats import DOCUMENT_FORMATS

    docs: list[Any] = []
    for m in shell.YAML_FENCE.finditer(src.text):
        try:
            got = bounded.load_yaml_all(textwrap.dedent(m.group(1)), f"{src.label} (yaml block)")
        except BadInput:
            continue
        docs += [d for d in got if isinstance(d, dict)]
    if not docs:
        return None
    hit = walk(replace(src, given_docs=tuple(docs)), DOCUMENT_FORMATS)
    return hit[1] if hit and hit[1] else None


FORMAT = DeploymentFormat("markdown-page", sniff, read)
