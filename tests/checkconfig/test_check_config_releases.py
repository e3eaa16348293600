"""Releases named by container image tags, and --vllm X on check-config."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import pytest

from vllm_pd_doctor.checkconfig import rules
from vllm_pd_doctor.checkconfig.exposure import exposure
from vllm_pd_doctor.deployment import parse
from vllm_pd_doctor.deployment.parse.loader import launch_from_command
from vllm_pd_doctor.knowledge.readers import image_release
from vllm_pd_doctor.results.checkconfig import VllmSource
from vllm_pd_doctor.results.launch import Server

KTC_P = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
KTC_D = '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'
P = f"vllm serve M --port 8100 --kv-transfer-config '{KTC_P}'"
D = f"vllm serve M --port 8200 --kv-transfer-config '{KTC_D}'"


@dataclass(frozen=True)
class _Imaged(Server):
    """A parsed server with the image its manifest names (the parser's field, issue 17)."""

    image: str | None = None


def server(cmd: str, role: str, image: str | None) -> Server:
    launch = launch_from_command(cmd, what=f"--{role}-cmd", role=role)
    return _Imaged(name=role, config=parse.parse_launch(launch), image=image)


def ctx(p_image: str | None, d_image: str | None, vllm: VllmSource | None) -> rules.Context:
    c = rules.Context(
        servers=(server(P, "prefill", p_image), server(D, "decode", d_image)),
        model=None,
        vllm=vllm,
        nixl=None,
    )
    return replace(c, exposure=exposure(c))


@pytest.mark.parametrize(
    ("tag", "version"),
    [
        ("v0.25.0", "0.25.0"),
        ("0.10.1.1", "0.10.1.1"),
        ("v0.9.0-cpu", "0.9.0"),
        ("v0.11.0rc2", "0.11.0rc2"),
        ("latest", None),
        ("nightly-0123abcd", None),
        (None, None),
    ],
)
def test_tag_version(tag: str | None, version: str | None) -> None:
    assert image_release.tag_version(tag) == version


def test_only_vllm_images_name_a_vllm_release() -> None:
    assert image_release.of(server(P, "prefill", "vllm/vllm-openai:v0.25.0")).version == "0.25.0"  # type: ignore[union-attr]
    llmd = image_release.of(server(P, "prefill", "ghcr.io/llm-d/llm-d-cuda:v0.8.1"))
    assert llmd is not None and llmd.version is None and llmd.product == "llm-d-cuda"
    # Dynamo's runtime image is tagged with Dynamo's release (public: ai-dynamo/dynamo deploy/*.yaml)
    dyn = image_release.of(server(P, "prefill", "nvcr.io/nvidia/ai-dynamo/vllm-runtime:1.3.0"))
    assert dyn is not None and dyn.version is None and dyn.product == "vllm-runtime"
    rocm = image_release.of(server(P, "prefill", "rocm/vllm:rocm6.4.1_vllm_0.10.1_20250909"))
    assert rocm is not None and rocm.product == "vllm"  # a vLLM build (its tag names no plain version)


V028 = VllmSource(python="/envs/0.28/bin/python", version="0.28.0", path="/envs/0.28/vllm")


def _ids(c: rules.Context) -> list[str]:
    return [f.id for f in rules.run_checks(c)]


def test_mismatch_between_image_and_checked_vllm() -> None:
    assert "image-release-mismatch" in _ids(ctx("vllm/vllm-openai:v0.25.0", "vllm/vllm-openai:v0.25.0", V028))
    assert "image-release-mismatch" not in _ids(
        ctx("vllm/vllm-openai:v0.28.0", "vllm/vllm-openai:v0.28.0", V028)
    )


def test_p_and_d_images_on_different_releases() -> None:
    assert "image-release-mismatch" in _ids(ctx("vllm/vllm-openai:v0.25.0", "vllm/vllm-openai:v0.28.0", None))


@pytest.mark.vllm
def test_check_config_vllm_option(python_buggy: str, cli: Any) -> None:
    """--vllm 0.28.0 reads pd-doctor's own 0.28.0 environment (provisioned by the fixture)."""
    r = cli("check-config", "--vllm", "0.28.0", "--prefill-cmd", P, "--decode-cmd", D, "--format", "json")
    doc = json.loads(r.stdout)
    assert doc["vllm"]["version"] == "0.28.0", r.stderr
    assert "--vllm" in r.stderr


def test_vllm_and_python_together_is_bad_input(cli: Any) -> None:
    r = cli("check-config", "--vllm", "0.28.0", "--python", "/usr/bin/python3", "--prefill-cmd", P)
    assert r.returncode == 2 and "--python and --vllm" in r.stderr


def test_release_from_image_tag_without_python() -> None:
    """No vLLM to read: the image tag names the release (a fact), the code is asked for."""
    from vllm_pd_doctor.checkconfig import core

    servers = (
        server(P, "prefill", "vllm/vllm-openai:v0.25.0"),
        server(D, "decode", "vllm/vllm-openai:v0.25.0"),
    )
    notes: list[str] = []
    none = VllmSource(python="py", version=None, path=None, error="no vLLM installed in this interpreter")
    got = core._release_from_images(none, servers, notes.append)
    assert got.version == "0.25.0" and got.path is None
    assert got.error is not None and "--vllm 0.25.0" in got.error
    assert notes and "image tag" in notes[0]
    c = replace(ctx("vllm/vllm-openai:v0.25.0", "vllm/vllm-openai:v0.25.0", got), vllm=got)
    assert "vllm-advisory" in _ids(replace(c, exposure=exposure(c)))
