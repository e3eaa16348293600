"""`pd-doctor triage`: the catalogue on real public logs and their lookalikes, the reader's
normalisation, the release/model decision, correlation of both sides, the CLI contract."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from vllm_pd_doctor import triage
from vllm_pd_doctor.knowledge.models.info import load_model
from vllm_pd_doctor.triage.catalogue import problems
from vllm_pd_doctor.triage.decide import ID_53514, Context, Release
from vllm_pd_doctor.triage.entries import CLASSES
from vllm_pd_doctor.triage.reader import normalise

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "triage"
ROOT = Path(__file__).resolve().parents[2]
HYBRID_MODEL = ROOT / "assets" / "models" / "tiny-hybrid"
DENSE_MODEL = ROOT / "assets" / "models" / "qwen3-dense"
IDS = {c.id for c in CLASSES}


def _sources() -> list[tuple[str, list[str], str]]:
    out = []
    for line in (FIX / "SOURCES").read_text(encoding="utf-8").splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        f, expects, source, _cause = (x.strip() for x in line.split("|", 3))
        out.append((f, expects.split(), source))
    return out


SOURCES = _sources()


def _classes(path: Path, ctx: Context | None = None) -> set[str]:
    return {v.cls for v in triage.triage([triage.LogInput(str(path))], ctx).verdicts}


def test_catalogue_entries_are_complete():
    assert [p for c in CLASSES for p in problems(c)] == []
    assert len(IDS) == len(CLASSES), "duplicate class id"


def test_every_class_has_a_real_fixture_and_a_lookalike():
    real = {e for f, exp, src in SOURCES if not src.startswith("crafted") for e in exp if e in IDS}
    negative = {e[4:] for _f, exp, _s in SOURCES for e in exp if e.startswith("not:")}
    assert IDS - real == set(), "classes without a real public log"
    assert IDS - negative == set(), "classes without a lookalike"
    assert {f for f, _e, _s in SOURCES} == {p.name for p in FIX.glob("*.log")}, "SOURCES and files differ"


def test_at_least_30_real_public_logs():
    real = [f for f, _e, src in SOURCES if not src.startswith("crafted")]
    assert len(real) >= 30, real


@pytest.mark.parametrize(
    ("name", "expects"), [(f, e) for f, e, _s in SOURCES], ids=[f for f, _e, _s in SOURCES]
)
def test_fixture(name: str, expects: list[str]):
    result = triage.triage([triage.LogInput(str(FIX / name))])
    got = {v.cls for v in result.verdicts}
    for e in expects:
        if e == "none":
            assert not got, f"{name}: expected no known cause, got {got}"
        elif e.startswith("not:"):
            assert e[4:] not in got, f"{name}: lookalike claimed as {e[4:]}"
        else:
            assert e in got, f"{name}: expected {e}, got {got}"
    for v in result.verdicts:  # every verdict is complete and points at real lines
        assert v.evidence and v.fix and v.references and v.next
        lines = (FIX / name).read_text(encoding="utf-8").splitlines()
        assert all(1 <= ev.line <= len(lines) for ev in v.evidence)


def test_every_fixture_fires_past_the_head_of_a_long_log():
    """Past the first HEAD_BYTES only TRIGGERS pick lines: each real fixture's deciding lines
    must hold one (a new WARNING/DEBUG-level class needs its words added to TRIGGERS)."""
    from vllm_pd_doctor.triage.catalogue import Matcher
    from vllm_pd_doctor.triage.scan import TRIGGERS

    for name, expects, _src in SOURCES:
        for cls in (e for e in expects if e in IDS):
            c = next(c for c in CLASSES if c.id == cls)
            causes: list[Matcher] = [m for m in c.matchers if m.role != "support"]
            text = (FIX / name).read_text(encoding="utf-8").splitlines()
            for m in causes:
                hits = [ln for ln in text if m.regex.search(normalise(ln, name, 1).msg)]
                assert not hits or any(any(t in ln for t in TRIGGERS) for ln in hits), (name, cls, m.anchor)


def test_no_known_cause_names_the_informative_lines():
    r = triage.triage([triage.LogInput(str(FIX / "vllm-22532-lmcache-example-unknown.log"))])
    assert not r.verdicts
    assert any("EngineCore failed to start" in e.text for e in r.informative)


# --- reader --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        "(EngineCore_DP0 pid=311) ERROR 08-25 10:14:40 [core.py:1098] AssertionError: boom",
        "[pod/vllm-prefill-0/vllm] 2026-08-25T10:14:40.123456789Z (EngineCore_DP0 pid=311) "
        "ERROR 08-25 10:14:40 [core.py:1098] AssertionError: boom",
        "2026-08-25T10:14:40.123Z ERROR 08-25 10:14:40 [core.py:1098] AssertionError: boom",
        "prefill-1  | (Worker pid=782969) (Worker_DP0_TP1_EP1 pid=782969) "
        "ERROR 08-25 10:14:40 [core.py:1098] "
        "AssertionError: boom",
        "\x1b[1;31mERROR\x1b[0m 08-25 10:14:40 [core.py:1098] AssertionError: boom\r",
        "(pid=4242) ERROR 08-25 10:14:40 [core.py:1098] AssertionError: boom",
        "(RayWorkerWrapper pid=533576, ip=10.90.67.84) ERROR 08-25 10:14:40 [core.py:1098] "
        "AssertionError: boom",
        json.dumps({"time": "2026-08-25T10:14:40Z", "level": "error", "message": "AssertionError: boom"}),
        json.dumps({"log": "ERROR 08-25 10:14:40 [core.py:1098] AssertionError: boom\n", "stream": "stderr"}),
    ],
)
def test_normalise_strips_every_prefix(raw: str):
    r = normalise(raw, "x.log", 1)
    assert r.msg == "AssertionError: boom"
    assert r.ts == "08-25 10:14:40"


def test_side_from_kubectl_prefix_and_compose():
    assert normalise("[pod/llm-decode-7f/vllm] INFO x", "f", 1).side == "decode"
    assert normalise("prefill-1  | INFO x", "f", 1).side == "prefill"


def test_gzip_crlf_and_a_huge_line(tmp_path: Path):
    text = (FIX / "vllm-42895-block-size-decode.log").read_text(encoding="utf-8")
    body = "x" * (5 << 20) + "\n" + text.replace("\n", "\r\n")
    p = tmp_path / "d.log.gz"
    p.write_bytes(gzip.compress(body.encode()))
    r = triage.triage([triage.LogInput(str(p))])
    assert r.verdicts[0].cls == "block-size-mismatch"
    assert r.verdicts[0].evidence[0].line == 5  # line numbers count the huge first line
    assert r.inputs[0].lines == text.count("\n") + 1


def test_facts_from_the_log(tmp_path: Path):
    p = tmp_path / "p.log"
    p.write_text(
        "INFO 08-25 10:00:00 [api_server.py:1395] vLLM API server version 0.28.0\n"
        "INFO 08-25 10:00:01 [model.py:563] Resolved architecture: GraniteMoeHybridForCausalLM\n"
        "INFO 08-25 10:00:01 [interface.py:612] Setting attention block size to 32 tokens to ensure "
        "that attention page size is >= mamba page size.\n"
        "INFO 08-25 10:00:01 [cli_args.py:325] non-default args: {'enable_prefix_caching': True, "
        '\'kv_transfer_config\': {"kv_connector":"NixlConnector","kv_role":"kv_producer"}}\n'
    )
    r = triage.triage([triage.LogInput(str(p))])
    f = r.inputs[0].facts
    assert (f.vllm_version, f.architecture, f.connector, f.kv_role) == (
        "0.28.0",
        "GraniteMoeHybridForCausalLM",
        "NixlConnector",
        "kv_producer",
    )
    assert f.prefix_caching is True and f.hybrid is True
    assert r.inputs[0].side == "prefill"


# --- #53514 decision ------------------------------------------------------------------------

P53514 = FIX / "vllm-53706-kimik3-prefill.log"


def _rel(late: bool | None, version: str = "0.28.0") -> Release:
    return Release(version=version, truncates_late=late, where="nixl/pull_scheduler.py:1", has_assert=True)


def test_53514_decisive_for_a_hybrid_model_on_a_late_release():
    ctx = Context(release=_rel(True), model=load_model(HYBRID_MODEL))
    r = triage.triage([triage.LogInput(str(P53514))], ctx)
    v = r.verdicts[0]
    assert (v.cls, v.confidence) == (ID_53514, "decisive")
    assert v.title.startswith("vLLM #53514, fixed in 0.29.0")
    assert v.missing == ()


def test_53514_not_claimed_on_a_fixed_release_or_a_dense_model():
    assert ID_53514 not in _classes(
        P53514, Context(release=_rel(False, "0.32.0"), model=load_model(HYBRID_MODEL))
    )
    assert ID_53514 not in _classes(P53514, Context(release=_rel(True), model=load_model(DENSE_MODEL)))
    assert ID_53514 not in _classes(P53514, Context(connector="LMCacheConnectorV1"))


def test_53514_log_alone_is_possible_with_what_is_missing():
    v = triage.triage([triage.LogInput(str(FIX / "llm-d-router-157-lmcache.log"))]).verdicts[0]
    assert (v.cls, v.confidence) == (ID_53514, "possible")
    assert any("--model" in m for m in v.missing) and any("--python" in m for m in v.missing)


def test_release_mismatch_is_warned(tmp_path: Path):
    p = tmp_path / "p.log"
    p.write_text(
        "INFO 08-25 10:00:00 [api_server.py:1395] vLLM API server version 0.28.0\n" + P53514.read_text()
    )
    r = triage.triage([triage.LogInput(str(p))], Context(release=_rel(True, "0.32.0")))
    assert any("0.28.0" in w and "0.32.0" in w for w in r.warnings)


# --- correlation ----------------------------------------------------------------------------


def test_decode_errors_after_the_prefill_death_point_at_its_cause(tmp_path: Path):
    p = tmp_path / "p.log"
    p.write_text(P53514.read_text())
    d = tmp_path / "d.log"
    d.write_text(
        (FIX / "vllm-41863-keyerror-decode.log").read_text().replace("05-01 15:00:23", "08-25 10:14:43")
    )
    ctx = Context(release=_rel(True), model=load_model(HYBRID_MODEL))
    r = triage.triage([triage.LogInput(str(d), "decode"), triage.LogInput(str(p), "prefill")], ctx)
    assert r.verdicts[0].cls == ID_53514 and r.verdicts[0].side == "prefill"
    follow = next(v for v in r.verdicts if v.cls == "handshake-keyerror-after-peer-death")
    assert (
        follow.side == "decode"
        and follow.note
        and ID_53514 in follow.note
        and "08-25 10:14:40" in follow.note
    )


# --- CLI --------------------------------------------------------------------------------------


def test_cli_json_and_exit_codes(cli):
    proc = cli("triage", str(FIX / "vllm-42895-block-size-decode.log"), "--format", "json")
    assert proc.returncode == 1, proc.stderr
    doc = json.loads(proc.stdout)
    assert doc["schema_version"] == 2
    v = doc["verdicts"][0]
    assert {"class", "title", "confidence", "evidence", "missing", "fix", "references", "next"} <= set(v)
    assert set(v["evidence"][0]) == {"file", "line", "text"}
    assert doc["inputs"][0]["file"].endswith("vllm-42895-block-size-decode.log")
    bad = cli("triage", str(FIX / "missing.log"))
    assert bad.returncode == 2 and "no such file" in bad.stderr and "Traceback" not in bad.stderr


def test_cli_stdin_markdown_and_list():
    from typer.testing import CliRunner

    from vllm_pd_doctor.cli import app

    runner = CliRunner()
    got = runner.invoke(
        app, ["triage", "-", "-f", "json"], input=(FIX / "vllm-27083-side-channel-host.log").read_text()
    )
    assert got.exit_code == 1, got.output
    assert json.loads(got.stdout)["verdicts"][0]["class"] == "side-channel-host-misconfigured"
    ok = runner.invoke(app, ["triage", str(FIX / "vllm-29369-healthy-startup.log"), "-f", "markdown"])
    assert ok.exit_code == 0 and "No known cause" in ok.stdout
    table = runner.invoke(app, ["triage", "--prefill-log", str(P53514)])
    assert table.exit_code == 1 and "#53514" in table.stdout
    ktc = '{"kv_connector":"LMCacheConnectorV1","kv_role":"kv_both"}'
    lm = runner.invoke(
        app,
        ["triage", str(P53514), "--prefill-cmd", f"vllm serve {HYBRID_MODEL} --kv-transfer-config '{ktc}'"],
    )
    assert lm.exit_code == 0 and "not #53514" in lm.output  # the connector decides: another producer
    listing = runner.invoke(app, ["triage", "--list", "-f", "json"])
    assert listing.exit_code == 0
    assert [c["id"] for c in json.loads(listing.stdout)["classes"]] == [c.id for c in CLASSES]
    assert runner.invoke(app, ["triage", "--list"]).exit_code == 0


def test_a_warning_level_cause_past_the_head(tmp_path: Path):
    from vllm_pd_doctor.triage.scan import HEAD_BYTES

    filler = "(APIServer pid=1) INFO 08-25 10:00:00 [loggers.py:259] Engine 000: Running: 3 reqs\n"
    p = tmp_path / "long.log"
    with p.open("w") as f:
        f.write(filler * (HEAD_BYTES // len(filler) + 1000))
        f.write((FIX / "kserve-6027-no-connector.log").read_text())
    assert _classes(p) == {"no-kv-connector"}


def test_interleaved_kubectl_prefix_stream_correlates_by_time_and_engine_id(tmp_path: Path):
    prefill = [
        "(EngineCore_DP0 pid=311) INFO 08-25 10:12:00 [factory.py:64] Creating v1 connector with name: "
        "NixlConnector and engine_id: b6b76ae8-5a6c-4104-bb1d-4966a7cb9e8c",
        *P53514.read_text().splitlines(),
    ]
    decode = (FIX / "vllm-41863-keyerror-decode.log").read_text().replace("05-01 15:00:23", "08-25 10:14:43")
    p = [f"[pod/vllm-prefill-0/vllm] 2026-08-25T10:14:40.1Z {line}" for line in prefill]
    d = [f"[pod/vllm-decode-0/vllm] 2026-08-25T10:14:43.5Z {line}" for line in decode.splitlines()]
    log = tmp_path / "all.log"
    log.write_text("\n".join(p[:3] + d[:2] + p[3:] + d[2:]) + "\n")
    r = triage.triage([triage.LogInput(str(log))])
    assert (r.verdicts[0].cls, r.verdicts[0].side) == (ID_53514, "prefill")
    follow = next(v for v in r.verdicts if v.cls == "handshake-keyerror-after-peer-death")
    assert follow.side == "decode" and follow.note and "b6b76ae8" in follow.note


def test_log_release_with_the_fix_is_not_53514(tmp_path: Path):
    p = tmp_path / "p.log"
    p.write_text(
        "INFO 08-25 10:00:00 [api_server.py:1395] vLLM API server version 0.32.0\n" + P53514.read_text()
    )
    r = triage.triage([triage.LogInput(str(p))])
    assert ID_53514 not in {v.cls for v in r.verdicts}
    assert any("0.32.0" in w and "#53514" in w for w in r.warnings)
    assert r.informative  # never a confident wrong answer: the lines, not a cause


def test_json_lines_log(tmp_path: Path):
    lines = (FIX / "kserve-6027-no-connector.log").read_text().splitlines()
    p = tmp_path / "j.log"
    p.write_text(
        "".join(
            json.dumps({"ts": "2026-08-25T10:00:00Z", "level": "warning", "msg": ln}) + "\n" for ln in lines
        )
    )
    assert _classes(p) == {"no-kv-connector"}


def test_report_public_form_keeps_the_catalogue_words():
    from vllm_pd_doctor.report.logs import public_triage

    line = (
        "ERROR 10-16 17:22:56 [x.py:1] RuntimeError: Remote NIXL agent engine ID mismatch. "
        "on gpu-7.corp.example\n"
    )
    r = triage.triage_texts([("decode-gpu-7.corp.example.log", line)])
    p = public_triage(r, lambda s: s.replace("gpu-7.corp.example", "<host-1>"))
    v, w = p.verdicts[0], r.verdicts[0]
    assert (v.cls, v.title, v.fix, v.next) == (w.cls, w.title, w.fix, w.next)
    assert "<host-1>" in v.evidence[0].text and "gpu-7" not in v.evidence[0].file
