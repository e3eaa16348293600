"""The deployment-format registry: one ordered list, each format a `DeploymentFormat` that some
real setup in the corpus is read by (tests/fixtures/check_config/corpus, each naming its source)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

from vllm_pd_doctor.deployment.parse import paste
from vllm_pd_doctor.deployment.parse.formats import DOCUMENT_FORMATS, FORMATS
from vllm_pd_doctor.deployment.parse.registry import DeploymentFormat, Source, walk
from vllm_pd_doctor.infra.errors import BadInput

CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "check_config" / "corpus"
NOT_IN_CORPUS = {
    "unread-documents": "refuses a JSON/YAML file no format reads (tests/fixtures/check_config/broken.yaml)",
    "pd-doctor-mapping": "pd-doctor's own format (tests/fixtures/check_config/multihost_nixl.yaml)",
    "docker-compose": "pending a public P/D compose file "
    "(tests/checkconfig/test_check_config_parse.py reads one)",
    "vllm-config-yaml": "pending a public vLLM --config file "
    "(tests/checkconfig/test_check_config_parse.py reads one)",
}


def _which(path: Path, exp: dict[str, Any]) -> str | None:
    variables = {str(k): str(v) for k, v in (exp.get("variables") or {}).items()}
    src = Source(paste.line_ends(path.read_text(encoding="utf-8")), str(path), path.suffix.lower(), variables)
    try:
        hit = walk(src, FORMATS)
    except BadInput:
        return None
    return hit[0].name if hit else None


def _corpus() -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for p in sorted(CORPUS.iterdir()):
        if p.name.endswith(".expect.yaml"):
            continue
        exp = yaml.safe_load(p.with_name(p.name + ".expect.yaml").read_text(encoding="utf-8"))
        if exp["parses"]:
            out.setdefault(str(_which(p, exp)), []).append(p.name)
    return out


def test_one_ordered_list_of_frozen_formats():
    names = [f.name for f in FORMATS]
    assert len(set(names)) == len(names), names
    assert all(isinstance(f, DeploymentFormat) for f in FORMATS)
    with pytest.raises(dataclasses.FrozenInstanceError):
        FORMATS[0].name = "x"  # type: ignore[misc]
    assert FORMATS[: len(DOCUMENT_FORMATS)] == DOCUMENT_FORMATS
    assert FORMATS[-1].name == "shell-script"  # any text: tried last


def test_every_format_reads_a_real_setup():
    by_format = _corpus()
    assert "None" not in by_format, by_format.get("None")
    missing = {f.name for f in FORMATS} - set(by_format) - set(NOT_IN_CORPUS)
    assert not missing, f"formats without a corpus pair (fixture + .expect.yaml): {sorted(missing)}"


def test_a_controller_kind_wins_over_the_generic_walk():
    doc = {
        "apiVersion": "serving.kserve.io/v1alpha1",
        "kind": "LLMInferenceService",
        "metadata": {"name": "s"},
        "spec": {"model": {"uri": "hf://a/b"}, "template": {"containers": [{"name": "main"}]}},
    }
    src = Source(yaml.safe_dump(doc), "x.yaml", ".yaml")
    hit = walk(src, FORMATS)
    assert hit is not None and hit[0].name == "kserve-llminferenceservice"
    assert hit[1][0].args[0] == "a/b"


def test_json_that_is_no_format_is_refused_not_read_as_shell():
    with pytest.raises(BadInput, match="expected a mapping"):
        walk(Source('"vllm serve m"', "x.json", ".json"), FORMATS)
