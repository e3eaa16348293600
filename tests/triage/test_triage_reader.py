"""The triage reader on logs as people have them: one real (or real-lines, exporter-layout) log
per line format gives the located traceback and ERROR line its plain log gives; the collector
prefix is learned from the records and stripped from continuation lines; plain logs are not
mistaken for exports; memory stays bounded on a long prefixed log."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from vllm_pd_doctor import triage
from vllm_pd_doctor.triage.reader import Record, candidate_lines, normalise
from vllm_pd_doctor.triage.reader_dialect import Dialect, sniff
from vllm_pd_doctor.triage.scan import HEAD_BYTES, head_triggers, triggers

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "triage"
PLAIN = FIX / "vllm-53706-kimik3-prefill.log"
FORMATS = sorted(p.name for p in FIX.glob("*-53706-prefill.log"))
STERN = FIX / "llm-d-394-stern-decode.log"
_SITE = "/usr/local/lib/python3.12/dist-packages/"
"""The path the elided copy shortens (`/usr/.../vllm/`): evidence compares modulo the elision."""


def _located(path: Path) -> tuple[object, ...]:
    r = triage.triage([triage.LogInput(str(path))])
    i = r.inputs[0]
    return (
        i.first_exception and i.first_exception.text.rstrip(),
        i.last_error and i.last_error.text.rstrip(),
        tuple(v.cls for v in r.verdicts),
        tuple(sorted(e.text.replace(_SITE, "/usr/.../") for v in r.verdicts for e in v.evidence)),
        i.side,
    )


def _records(path: Path) -> list[Record]:
    with path.open("rb") as f:
        lines = list(candidate_lines(f, triggers(), head_triggers(), HEAD_BYTES))
    return [normalise(raw, path.name, n) for n, raw in lines if raw]


def test_every_format_is_covered():
    assert len(FORMATS) >= 14, FORMATS


@pytest.mark.parametrize("name", FORMATS)
def test_format_locates_what_the_plain_log_locates(name: str):
    plain = _located(PLAIN)
    assert plain[0] == "AssertionError" and plain[2]  # the plain log's answer is not empty
    assert _located(FIX / name) == plain


def test_stern_prefix_frames_are_records_of_the_decode_engine():
    """vllm's `[distributed/.../v1/nixl_connector.py:723]` behind stern's pod and container: each
    frame and statement of the `_nixl_handshake` traceback comes out as vLLM wrote it."""
    recs = _records(STERN)
    frame = next(r for r in recs if "_nixl_handshake" in r.msg)
    assert frame.msg.startswith('  File "/opt/vllm-source/vllm/distributed/kv_transfer/')
    assert (frame.level, frame.proc, frame.side) == ("ERROR", "EngineCore_DP0", "decode")
    assert frame.src == "distributed/.../v1/nixl_connector.py:723" and frame.ts == "10-27 22:25:30"
    stmt = normalise(STERN.read_text().splitlines()[-1], "x", 6)
    assert stmt.msg == "    p_remote_rank = self.tp_rank // tp_ratio"
    assert triage.triage([triage.LogInput(str(STERN))]).inputs[0].side == "decode"


def test_stern_prefix_gives_the_plain_exception_line(tmp_path: Path):
    """The same statement and exception as vllm-project/vllm#21576 posted them (plain), and behind
    llm-d#394's stern prefix: the exception line is found the same."""
    plain = (
        "(EngineCore_0 pid=286) ERROR 07-25 03:33:23 [nixl_connector.py:548]     p_remote_rank = "
        "self.tp_rank // tp_ratio\n"
        "(EngineCore_0 pid=286) ERROR 07-25 03:33:23 [nixl_connector.py:548] ZeroDivisionError: "
        "integer division or modulo by zero\n"
    )
    prefix = "ms-pd-llm-d-modelservice-decode-6c8f9c4df6-vh88z vllm (APIServer pid=1) "
    a, b = tmp_path / "plain.log", tmp_path / "stern.log"
    a.write_text(plain)
    b.write_text("".join(prefix + ln + "\n" for ln in plain.splitlines()))
    assert _located(a)[:2] == ("ZeroDivisionError: integer division or modulo by zero",) * 2
    assert _located(b)[:2] == _located(a)[:2]


def test_journald_raw_traceback_learns_the_prefix():
    """vllm#12474: no vLLM record at all; the prefix is learned from the frame lines and the
    exception line (no record of its own) loses exactly that prefix."""
    i = triage.triage([triage.LogInput(str(FIX / "vllm-12474-journald.log"))]).inputs[0]
    assert i.first_exception is not None
    assert i.first_exception.text.rstrip() == (
        "RuntimeError: Engine process failed to start. See stack trace for the root cause."
    )
    assert i.first_exception.line == 3
    frames = [r for r in _records(FIX / "vllm-12474-journald.log") if "File" in r.msg]
    assert frames and frames[0].msg.startswith('  File "/networkpath/')


def test_nested_labels_and_raw_frames():
    """kaito#2008: a raw line behind nested process labels; LMCache#1436: a raw traceback behind
    one label. Both hand over the ValueError line vLLM raised."""
    raw = (FIX / "kaito-2008-hma-unify-nested.log").read_text().splitlines()
    r = normalise(raw[1], "k", 2)
    assert (r.msg, r.proc) == ("    unify_hybrid_kv_cache_specs(kv_cache_spec)", "EngineCore_DP0")
    for name in ("kaito-2008-hma-unify-nested.log", "lmcache-1436-hma-unify-raw.log"):
        first = triage.triage([triage.LogInput(str(FIX / name))]).inputs[0].first_exception
        assert first is not None and first.text.startswith("ValueError: Hybrid KV cache manager is disabled")


def test_hybrid_example_hands_over_the_warning_and_the_exception(tmp_path: Path):
    """Issue 24's second example: the config warning (vllm#41830) and the ValueError (kaito#2008)
    behind a stern prefix, past the head of a long log: both lines reach the scan."""
    prefix = "ms-pd-decode-6c8f9 vllm "
    warn = (
        "(APIServer pid=1) WARNING 04-29 18:34:02 [config.py:1297] Turning off hybrid kv cache manager "
        "because `--kv-transfer-config` is set. This will reduce the performance of vLLM on LLMs with "
        "sliding window attention or Mamba attention."
    )
    exc = (
        "(APIServer pid=45) (EngineCore_DP0 pid=386) ERROR 04-29 18:34:40 [core.py:1100] ValueError: "
        "Hybrid KV cache manager is disabled but failed to convert the KV cache specs to one unified type."
    )
    filler = prefix + "(APIServer pid=1) INFO 04-29 18:34:01 [loggers.py:259] Engine 000: Running: 0 reqs\n"
    p = tmp_path / "d.log"
    with p.open("w") as f:
        f.write(filler * (HEAD_BYTES // len(filler) + 10))
        f.write(prefix + warn + "\n" + prefix + exc + "\n")
    msgs = [r.msg for r in _records(p)]
    assert msgs[-2].startswith("Turning off hybrid kv cache manager because")
    assert msgs[-1].startswith("ValueError: Hybrid KV cache manager is disabled but failed to convert")


def test_plain_logs_are_not_taken_for_exports_or_pastes():
    """Every plain fixture (the lookalikes of the dialects) reads as a plain log."""
    others = [p for p in FIX.glob("*.log") if "53706-prefill" not in p.name or p == PLAIN]
    for p in others:
        d = sniff(p.read_bytes())
        assert (d.csv, d.json_doc, d.wrap) == (None, False, None), (p.name, d)
    assert sniff((FIX / "datadog-csv-53706-prefill.log").read_bytes()).csv == (",", 3)
    assert sniff((FIX / "cloudwatch-filter-json-53706-prefill.log").read_bytes()).json_doc
    assert sniff((FIX / "wrapped-80-53706-prefill.log").read_bytes()).wrap == 80
    assert sniff((FIX / "html-escaped-53706-prefill.log").read_bytes()) == Dialect(html=True)


def test_a_record_quoted_in_a_message_keeps_its_own_header():
    quoted = "upstream said: ERROR 10-27 22:25:29 [x.py:1] boom"
    r = normalise("ERROR 10-27 22:25:30 [proxy.py:9] " + quoted, "f", 1)
    assert (r.src, r.msg) == ("proxy.py:9", quoted)


def test_long_prefixed_log_streams_in_bounded_memory():
    """A stern-prefixed log much larger than the reader's chunk: the traceback at its end is
    found, line numbers count every line, and the reader never holds more than a chunk."""
    prefix = b"ms-pd-prefill-7f9 vllm "
    line = prefix + b"(APIServer pid=1) INFO 10-27 22:25:30 [loggers.py:259] Engine 000: Running: 3 reqs\n"
    n = (12 << 20) // len(line)
    tail = STERN.read_bytes()
    data = line * n + tail
    got = list(candidate_lines(io.BytesIO(data), triggers(), head_triggers(), HEAD_BYTES))
    assert got[-1] == (n + tail.count(b"\n"), "")
    assert [ln for ln, _ in got[:-1]][-1] == n + 6


def test_python_logging_prefix_and_a_cut_exception_line():
    """olmocr#260: vLLM's traceback inside another program's logging prefix, cut mid-word: the
    prefix is learned from the frames and the (cut) exception line is located."""
    path = FIX / "olmocr-260-python-logging.log"
    i = triage.triage([triage.LogInput(str(path))]).inputs[0]
    assert i.first_exception is not None
    assert (i.first_exception.text, i.first_exception.line) == ("RuntimeError: Engine core ini", 5)
    stmt = [r.msg for r in _records(path) if "raise RuntimeError" in r.msg]
    assert stmt == ['    raise RuntimeError("Engine core initialization failed. "']


def test_a_plain_log_keeps_its_raw_lines_whole(tmp_path: Path):
    """No collector prefix on the records: nothing is learned, and a raw line (UCX's own) keeps
    every word (the learned prefix is never guessed from the raw lines themselves)."""
    p = tmp_path / "p.log"
    p.write_text(
        "(EngineCore_DP0 pid=311) INFO 08-25 10:12:01 [model.py:563] Resolved architecture: X\n"
        "(EngineCore_DP0 pid=311) ERROR 08-25 10:14:40 [core.py:1098] EngineCore encountered a fatal error.\n"
        "ucx_utils.cpp:43 UCX ERROR tcp_ep send(110) failed: Input/output error\n"
    )
    msgs = [r.msg for r in _records(p)]
    assert msgs[-1] == "ucx_utils.cpp:43 UCX ERROR tcp_ep send(110) failed: Input/output error"
