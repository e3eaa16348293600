"""The vLLM release a container image names in its tag (`vllm/vllm-openai:v0.25.0` -> 0.25.0).

Only images that are vLLM builds count (the repository's last path component starts with
`vllm`, e.g. `vllm/vllm-openai`, `vllm-cpu-release-repo`, `rocm/vllm`); a platform image's tag
(`llm-d-cuda:v0.8.1`, Dynamo's `vllm-runtime:1.3.0`) is that platform's release, reported as such
and never read as vLLM's (the vLLM inside is then an unknown release: no release rule fires).
The tag gives the release only; the verdict still comes from that release's code (`--vllm X`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Protocol

from packaging.version import InvalidVersion, Version


class Server(Protocol):
    """What is read of a server here (check-config's `Server` has both)."""

    @property
    def name(self) -> str: ...

    @property
    def image(self) -> str | None: ...


_TAG_VERSION = re.compile(r"^v?(\d+\.\d+(?:\.\d+)*(?:(?:rc|post|\.post|\.dev|dev)\d+)?)(?:$|[-_+])")


@dataclass(frozen=True)
class ImageRelease:
    server: str
    image: str
    version: str | None
    """The vLLM release the tag names; None for a non-vLLM image or a tag that is no version."""
    product: str
    """The image repository's last path component (`vllm-openai`, `llm-d-cuda`)."""


def _split(image: str) -> tuple[str, str | None]:
    ref = image.split("@", 1)[0]
    slash, colon = ref.rfind("/"), ref.rfind(":")
    if colon > slash:
        return ref[:colon], ref[colon + 1 :] or None
    return ref, None


def tag_version(tag: str | None) -> str | None:
    """`v0.25.0` / `0.10.1.1-cu128` / `v0.9.0rc2` -> a normalised version; None otherwise."""
    if not tag:
        return None
    m = _TAG_VERSION.match(tag.strip())
    if not m:
        return None
    try:
        return str(Version(m.group(1)))
    except InvalidVersion:
        return None


def of(server: Server) -> ImageRelease | None:
    image = getattr(server, "image", None)
    if not isinstance(image, str) or not image:
        return None
    repo, tag = _split(image)
    product = repo.rsplit("/", 1)[-1]
    version = tag_version(tag) if _vllm_build(product) else None
    return ImageRelease(server=server.name, image=image, version=version, product=product)


def _vllm_build(product: str) -> bool:
    """A vLLM build: its name starts with `vllm` and is not a platform's runtime image (a
    `*-runtime` image, such as NVIDIA Dynamo's `nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.0`, is
    tagged with the platform's release, which is not vLLM's: its vLLM release is unknown)."""
    p = product.lower()
    return p.startswith("vllm") and not p.endswith("-runtime")


def releases(servers: tuple[Server, ...]) -> list[ImageRelease]:
    return [r for r in (of(s) for s in servers) if r is not None]


def vllm_versions(servers: tuple[Server, ...]) -> dict[str, list[str]]:
    """vLLM release -> the servers whose image names it."""
    out: dict[str, list[str]] = {}
    for r in releases(servers):
        if r.version:
            out.setdefault(r.version, []).append(r.server)
    return out
