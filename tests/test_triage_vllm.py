"""Triage against real vLLM releases: every vLLM log line of the catalogue exists in the source
of a release, and --python decides #53514 (0.28.0 truncates late, 0.32.0 does not)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vllm_pd_doctor import triage
from vllm_pd_doctor.knowledge import nixl_info
from vllm_pd_doctor.knowledge.model_info import load_model
from vllm_pd_doctor.triage.decide import ID_53514, Context
from vllm_pd_doctor.triage.entries import CLASSES

pytestmark = pytest.mark.vllm

FIX = Path(__file__).parent / "fixtures" / "triage"
HYBRID_MODEL = Path(__file__).parent.parent / "repro" / "models" / "tiny-hybrid"


def _source(python: str) -> str:
    path = nixl_info.probe(python, import_nixl=False).vllm_path
    assert path, python
    parts = []
    for d, _dirs, files in os.walk(path):
        parts += [
            (Path(d) / f).read_text(encoding="utf-8", errors="replace") for f in files if f.endswith(".py")
        ]
    return "\n".join(parts)


def test_every_vllm_line_of_the_catalogue_is_in_a_release(python_buggy: str, python_fixed: str):
    sources = (_source(python_buggy), _source(python_fixed))
    needles = [
        (c.id, m.source_needle) for c in CLASSES for m in c.matchers if m.origin == "vllm" and m.source_needle
    ]
    assert len(needles) >= 12
    missing = [(cid, n) for cid, n in needles if not any(n in s for s in sources)]
    assert missing == []


def test_python_decides_53514(python_buggy: str, python_fixed: str):
    log = triage.LogInput(str(FIX / "vllm-53706-kimik3-prefill.log"))
    model = load_model(HYBRID_MODEL)
    buggy = triage.release_from_python(python_buggy)
    assert buggy.truncates_late is True and buggy.has_assert is True
    top = triage.triage([log], Context(release=buggy, model=model)).verdicts[0]
    assert (top.cls, top.confidence) == (ID_53514, "decisive")
    fixed = triage.release_from_python(python_fixed)
    assert fixed.truncates_late is False
    r = triage.triage([log], Context(release=fixed, model=model))
    assert ID_53514 not in {v.cls for v in r.verdicts}
    assert any("not #53514" in w for w in r.warnings)
