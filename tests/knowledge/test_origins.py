"""The origin index (knowledge/origins) and triage's use of it: statements read by ast, lines
located in the packaged index, classes keyed to code across rewordings, the unknown-cause verdict."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from vllm_pd_doctor import triage
from vllm_pd_doctor.formats import emit
from vllm_pd_doctor.knowledge import origins
from vllm_pd_doctor.knowledge.facts.releases import version_key
from vllm_pd_doctor.knowledge.origins import build
from vllm_pd_doctor.knowledge.origins.extract import PLACEHOLDER as P
from vllm_pd_doctor.knowledge.origins.extract import statements
from vllm_pd_doctor.triage.entries import CLASSES
from vllm_pd_doctor.triage.reader import normalise

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "triage"

SRC = """
import logging
logger = logging.getLogger(__name__)

class Worker:
    def handshake(self, remote, tp):
        if remote.engine_id != self.engine_id:
            raise RuntimeError(f"engine ID mismatch. Expected {self.engine_id}, got {remote.engine_id}")
        else:
            logger.warning("Handshake with %s took %.2f s", remote, 1.0)
        assert tp % 2 == 0, "tp must be even, got {}".format(tp)
        logger.info_once("static " + "text")
        raise
"""


def test_statements_hold_templates_conditions_and_functions():
    got = {(s.kind, s.what): s for s in statements(SRC)}
    r = got[("raise", "RuntimeError")]
    assert r.function == "Worker.handshake"
    assert r.template == f"engine ID mismatch. Expected {P}, got {P}"
    assert r.condition == "remote.engine_id != self.engine_id"
    w = got[("log", "WARNING")]
    assert w.template == f"Handshake with {P} took {P} s"
    assert w.condition == "not (remote.engine_id != self.engine_id)"
    a = got[("assert", "AssertionError")]
    assert (a.condition, a.template) == ("tp % 2 == 0", f"tp must be even, got {P}")
    assert got[("log", "INFO")].template == "static text"
    assert got[("def", "")].function == "Worker.handshake"
    assert len(got) == 5  # a bare `raise` names no exception


def test_packaged_index_covers_the_supported_releases():
    ix = origins.load()
    have = ix.releases["vllm"]
    for v in ("0.20.2", "0.27.1", "0.28.0", "0.32.0", "0.33.0"):
        assert v in have
    assert list(have) == sorted(have, key=version_key)
    assert ix.releases.get("nixl") and ix.releases.get("lmcache")
    assert origins.DATA.stat().st_size < 3_000_000


def test_merging_a_release_is_idempotent():
    doc: dict = {}
    build.add_release(doc, "vllm", "1.0.0", [("a/b.py", SRC)])
    build.add_release(doc, "vllm", "1.1.0", [("a/b.py", SRC.replace("took", "lasted"))])
    build.sort_releases(doc)
    once = json.dumps(doc, sort_keys=True)
    build.add_release(doc, "vllm", "1.1.0", [("a/b.py", SRC.replace("took", "lasted"))])
    build.sort_releases(doc)
    assert json.dumps(doc, sort_keys=True) == once
    ix = origins.OriginIndex(build.loads(build.dumps(doc)))
    old = ix.match("Handshake with peer-1 took 3.20 s", "WARNING")
    assert old is not None and old.releases == ("1.0.0",)
    life = ix.lifetime(old)
    assert (life.changed_in, life.change) == ("1.1.0", "changed")
    assert ix.at("a/b.py", old.line_in("1.0.0") or 0, "1.0.0") == old


# --- every vLLM-written ERROR line of the fixtures is located ----------------------------------

NOT_LOCATABLE = {
    "vllm-27083-side-channel-host.log:2": "cut short in the thread (`Handshake failed for request "
    "chatcmpl`): half of 0.11.2's template (`..., marking blocks as invalid`), below what a match needs",
    "llm-d-router-157-lmcache.log:1": "the excerpt posts the exception line before its frames",
    "vllm-21583-spec-decode-blocks.log:7": "a blank record the worker's traceback ends with (no message)",
    "vllm-21583-spec-decode-blocks.log:8": "the excerpt cuts 0.10's config dump (dump_input.py:69) "
    "before the template's closing `, `; the logger's line is 0.10's, older than the index",
}
"""Lines no indexed release (0.8 - 0.33, in the index's scope) can hold, and why."""
_NOT_VLLM_EXC = re.compile(r"^(nixl[\w.]*|\w*nixl\w*Error)\b")


def _vllm_error_lines() -> list[tuple[str, int, str]]:
    out = []
    for f in sorted(FIX.glob("*.log")):
        if f.name.startswith("vllm-ascend-"):  # written by the vllm-ascend plugin, not vLLM
            continue
        for i, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            r = normalise(line, f.name, i)
            if r.level != "ERROR" or not (r.src or "").split(":")[0].endswith(".py"):
                continue
            if r.msg.startswith((" ", "\t", "Traceback", "^")) or _NOT_VLLM_EXC.match(r.msg):
                continue  # traceback bodies; exceptions raised by NIXL's C++ bindings
            out.append((f.name, i, r.msg))
    return out


def test_every_vllm_error_line_of_the_fixtures_is_located():
    lines = _vllm_error_lines()
    assert len(lines) >= 20
    located: dict[str, set[int]] = {}
    missing = []
    for name, i, msg in lines:
        if name not in located:
            r = triage.triage([triage.LogInput(str(FIX / name))])
            located[name] = {ll.evidence.line for ll in r.located}
        if i not in located[name] and f"{name}:{i}" not in NOT_LOCATABLE:
            missing.append(f"{name}:{i}: {msg[:100]}")
    assert missing == []
    stale = [k for k in NOT_LOCATABLE if int(k.split(":")[1]) in located.get(k.split(":")[0], set())]
    assert stale == [], "now located: drop from NOT_LOCATABLE"


def test_a_keyerror_is_located_at_its_function_after_a_move():
    """vllm PR #41863: a KeyError in 0.1x's nixl_connector.py done_callback: located in that file
    (the index holds 0.1x), and the release that moved it into the NIXL worker package is named."""
    r = triage.triage([triage.LogInput(str(FIX / "vllm-41863-keyerror-decode.log"))])
    o = next(ll.origin for ll in r.located if ll.origin.exception == "KeyError")
    assert (
        o.kind == "frame" and o.function.endswith("done_callback") and o.file.endswith("v1/nixl_connector.py")
    )
    assert o.next_change is not None and o.next_change.kind == "moved"
    assert o.next_change.moved_to is not None and "/nixl/" in o.next_change.moved_to


def test_a_traceback_is_located_at_its_statement():
    r = triage.triage([triage.LogInput(str(FIX / "vllm-53706-kimik3-prefill.log"))])
    exc = [ll.origin for ll in r.located if ll.origin.kind == "assert"]
    assert exc and exc[0].where == "v1/core/sched/scheduler.py:Scheduler.schedule"
    assert exc[0].condition == "num_new_tokens > 0" and exc[0].how in ("statement", "frame")


# --- classes keyed to code ----------------------------------------------------------------------


def test_every_code_key_of_the_catalogue_has_origins():
    ix = origins.load()
    for c in CLASSES:
        for m in (*c.matchers, *c.excludes):
            if m.code is not None:
                assert [o for o in ix.origins if m.code.fits(o)], f"{c.id}: {m.code} fits no statement"


def test_a_reworded_message_keeps_its_class():
    """vllm#42911 (0.19.1) raises `Hybrid KV cache manager is disabled but failed to convert ...`; the
    entry's sentence is the 0.27+ warning. The statement's function keys the class in both."""
    hma = next(c for c in CLASSES if c.id == "hma-disabled-by-connector")
    text = (FIX / "vllm-42911-hma-unify-failed.log").read_text(encoding="utf-8").splitlines()
    assert not any(m.anchor and m.regex.search(normalise(t, "x", 1).msg) for m in hma.matchers for t in text)
    r = triage.triage([triage.LogInput(str(FIX / "vllm-42911-hma-unify-failed.log"))])
    assert "hma-disabled-by-connector" in {v.cls for v in r.verdicts}
    code = next(m.code for m in hma.matchers if m.code)
    templates = {o.template for o in origins.load().origins if code.fits(o)}
    assert len(templates) >= 2, templates


# --- unknown is still an answer -----------------------------------------------------------------


def test_unknown_cause_names_the_origin():
    """vllm#32222: NIXL not importable in the ROCm CI image; no catalogue class."""
    r = triage.triage([triage.LogInput(str(FIX / "vllm-32222-nixl-not-available.log"))])
    assert not r.verdicts
    u = r.unknown
    assert u is not None and u.confidence == "unknown-cause"
    assert u.evidence.text == "RuntimeError: NIXL is not available"
    o = u.origin
    assert o is not None and o.kind == "raise" and o.exception == "RuntimeError"
    assert o.function.endswith("__init__") and "/nixl/" in o.file
    assert o.condition and "is None" in o.condition
    assert o.releases.endswith("0.33.0") and o.changed_in is None
    assert "NIXL is not available" in u.search and u.next
    doc = json.loads(emit(r, "json"))
    assert doc["no_known_cause"] is True and doc["unknown"]["origin"]["exception"] == "RuntimeError"
    assert doc["located"] and {"schema_version", "verdicts", "informative"} <= set(doc)
    md = emit(r, "markdown")
    assert "unknown-cause" in md and "NixlBaseConnectorWorker.__init__" in md
    assert "unknown-cause" in emit(r, "table", width=200)


def test_a_release_the_index_lacks_says_so(tmp_path: Path):
    p = tmp_path / "d.log"
    p.write_text(
        "INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version 0.7.3\n"
        + (FIX / "vllm-42911-hma-unify-failed.log").read_text(encoding="utf-8"),
        encoding="utf-8",
    )
    r = triage.triage([triage.LogInput(str(p))])
    assert any("0.7.3 is not in the origin index" in w for w in r.warnings)


@pytest.mark.parametrize("release", ["0.28.0", "0.32.0"])
def test_a_logger_location_in_an_indexed_release_is_exact(release: str):
    ix = origins.load()
    o = next(
        o
        for o in ix.origins
        if o.where.endswith("EngineCore.add_request") and o.kind == "log" and release in o.releases
    )
    line = o.line_in(release)
    assert line is not None
    text = (o.template or "").replace(P, "x").split("\n")[0]
    log = f"vLLM API server version {release}\nWARNING 01-01 00:00:00 [v1/engine/core.py:{line}] {text}\n"
    r = triage.triage_text(log)
    hit = [ll.origin for ll in r.located if ll.origin.how == "logger"]
    assert hit and hit[0].exact and hit[0].line == line and hit[0].release == release


def test_a_traceback_cut_before_its_exception_still_names_its_code():
    """llm-d#394 (stern-prefixed): the excerpt ends at `p_remote_rank = self.tp_rank // tp_ratio` in
    0.1x's nixl_connector.py; the function lives on in the NIXL worker package (moved since)."""
    r = triage.triage([triage.LogInput(str(FIX / "llm-d-394-stern-decode.log"))])
    u = r.unknown
    assert u is not None and u.origin is not None and u.side == "decode"
    assert u.origin.kind == "frame" and u.origin.function.endswith("._nixl_handshake")
    assert (
        u.origin.file.endswith("v1/nixl_connector.py") and u.origin.line == 651 and u.origin.release is None
    )
    assert u.origin.next_change is not None and u.origin.next_change.kind == "moved"
    assert "_nixl_handshake" in u.search  # no repro scenario drives the handshake: the report next
    assert u.next.startswith("pd-doctor report")


def test_every_mapped_scenario_is_registered():
    from vllm_pd_doctor.knowledge.facts import origin_scenarios, scenarios

    assert set(origin_scenarios.SCENARIOS.values()) <= set(scenarios.ids())
    s = origin_scenarios.scenario_for("Scheduler._update_from_kv_xfer_finished")
    assert s is not None and s.id == "abort-race"
    ix = origins.load()
    names = {o.function.rsplit(".", 1)[-1] for o in ix.origins}
    assert set(origin_scenarios.SCENARIOS) <= names, "a mapped function no indexed release has"


def test_the_report_excerpt_shows_triage_origin_beside_the_logs_own():
    from vllm_pd_doctor.report import logs

    found = logs.find((FIX / "vllm-42911-hma-unify-failed.log").read_text(), "x.log")
    tb = next(e for e in found.excerpts if e.kind == "traceback")
    assert tb.origin is not None
    own, _, tri = tb.origin.partition("; triage: ")
    assert own.startswith("vllm/") and " in " in own  # the log's innermost vLLM frame (cc3)
    assert tri.startswith("vllm/v1/core/kv_cache_utils.py:unify_hybrid_kv_cache_specs (raise ValueError")
    plain = logs.find("INFO 11-30 22:58:12 [api_server.py:1] all well\n", "ok.log")
    assert all("triage:" not in (e.origin or "") for e in plain.excerpts)
