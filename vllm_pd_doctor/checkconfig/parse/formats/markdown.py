"""A Markdown page with ```yaml blocks (a manifest, a values file, a Serve config): the blocks'
mappings are read by the document formats, as one file of documents. A page that also has shell
blocks is read as shell text first (its commands win); a page whose yaml blocks hold no server is
handed on to the shell format."""

from __future__ import annotations

import textwrap
from dataclasses import replace
from typing import Any

from vllm_pd_doctor.checkconfig.parse import bounded
from vllm_pd_doctor.checkconfig.parse.formats import shell
from vllm_pd_doctor.checkconfig.parse.found import Found
from vllm_pd_doctor.checkconfig.parse.registry import DeploymentFormat, Source, walk
from vllm_pd_doctor.errors import BadInput


def sniff(src: Source) -> bool:
    return src.given_docs is None and shell.YAML_FENCE.search(src.text) is not None


def read(src: Source) -> list[Found] | None:
    if shell.FENCE.search(src.text):
        got = shell.read(src)
        if got is not None:
            return got
    return _yaml_blocks(src)


def _yaml_blocks(src: Source) -> list[Found] | None:
    from vllm_pd_doctor.checkconfig.parse.formats import DOCUMENT_FORMATS

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
