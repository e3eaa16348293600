"""Issue 32: every line looked up whatever its shape, values read from it, what the next release
changed there, and the public threads that quote it (the answer for logs no class knows)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vllm_pd_doctor import triage
from vllm_pd_doctor.cli import app
from vllm_pd_doctor.knowledge import origins
from vllm_pd_doctor.knowledge import threads as thread_index
from vllm_pd_doctor.knowledge.origins import build
from vllm_pd_doctor.knowledge.origins.extract import statements
from vllm_pd_doctor.knowledge.origins.index import nearest_hunk
from vllm_pd_doctor.triage import threads as thread_match

THREADS = Path(__file__).resolve().parents[1] / "fixtures" / "threads"
EXPIRED_0 = (
    "Releasing expired KV blocks for request cmpl-3da205a6-1c3c-41b5-aeaa-b8421e81fd5c-0 which were "
    "retrieved by 0 decode worker(s) within 120 seconds."
)
"""vllm-project/vllm#25562, without the logger's prefix (as threads quote it)."""
SHAPE = (
    "Remote P worker KV layer cache must be of shape [2, N, local_kv_heads*tp_ratio, block_size, "
    "head_dim] and same dtype."
)
"""The NIXL worker's handshake assert message, as a thread quotes it (issue 32)."""


def _json(args: list[str], stdin: str | None = None) -> dict:
    got = CliRunner().invoke(app, ["triage", *args, "-f", "json"], input=stdin)
    assert got.exit_code in (0, 1), got.output
    return json.loads(got.stdout)


def test_a_bare_warning_line_gets_its_origin_end_to_end(tmp_path: Path):
    p = tmp_path / "one.log"
    p.write_text(EXPIRED_0 + "\n", encoding="utf-8")
    doc = _json([str(p)])
    assert doc["schema_version"] == 2
    o = doc["unknown"]["origin"]
    assert o["function"].endswith("get_finished") and o["level"] == "WARNING" and o["kind"] == "log"
    vals = {v["name"]: (v["type"], v["text"]) for v in o["values"]}
    assert vals["count"] == ("count", "0") and vals["req_id"][1].startswith("cmpl-3da205a6")
    assert doc["located"] and doc["located"][0]["evidence"]["line"] == 1
    # no release to pin it: the same message's other homes, the 0.1x module among them
    assert any("v1/nixl_connector.py:NixlConnectorWorker.get_finished" in a for a in o["also"])


@pytest.mark.parametrize("line", [SHAPE, f"AssertionError: {SHAPE}"])
def test_a_bare_exception_line_gets_its_origin(line: str):
    """The message alone and the exception line alone (no frame, no prefix), through `--line`."""
    doc = _json(["--line", line])
    o = doc["unknown"]["origin"]
    assert o["kind"] == "assert" and o["exception"] == "AssertionError"
    assert o["function"].endswith("_validate_remote_agent_handshake") and "nixl" in o["file"]
    assert o["next_change"] is not None  # the releases after it changed or moved that code


def test_one_line_on_stdin_is_looked_up_like_a_log():
    doc = _json(["-"], stdin=f"  {EXPIRED_0}  \n")
    assert doc["unknown"]["origin"]["function"].endswith("get_finished")


def test_line_and_files_together_is_bad_input(tmp_path: Path, cli):  # type: ignore[no-untyped-def]
    p = tmp_path / "x.log"
    p.write_text("x\n", encoding="utf-8")
    got = cli("triage", str(p), "--line", "x")
    assert got.returncode == 2 and "--line" in got.stderr and "Traceback" not in got.stderr


def test_a_message_split_over_two_lines_is_joined():
    text = (
        "Releasing expired KV blocks for request cmpl-9 which were retrieved by 0\n"
        "decode worker(s) within 120 seconds.\n"
    )
    r = triage.triage_text(text)
    second = [ll for ll in r.located if ll.evidence.line == 2]
    assert second and second[0].origin.function.endswith("get_finished")
    assert {(v.name, v.text) for v in second[0].origin.values} >= {("count", "0"), ("req_id", "cmpl-9")}


def test_a_condensed_traceback_is_located():
    """A hand-shortened trace: one frame of 0.1x's nixl_connector.py and the exception line."""
    text = (
        '  File ".../vllm/distributed/kv_transfer/kv_connector/v1/nixl_connector.py", line 700, in '
        "add_remote_agent\n"
        f"AssertionError: {SHAPE}\n"
    )
    r = triage.triage_text(text)
    exc = [ll.origin for ll in r.located if ll.origin.kind == "assert"]
    assert exc and exc[0].file.endswith("v1/nixl_connector.py")


# --- the index across releases: a function that moved -------------------------------------------


def _defs(ix: origins.OriginIndex, function: str, release: str) -> set[str]:
    return {
        o.file for o in ix.origins if o.kind == "def" and o.function == function and release in o.releases
    }


def test_a_moved_function_is_in_the_right_file_for_each_release():
    """The NIXL worker's get_finished: 0.11.0 (2025) in `v1/nixl_connector.py`, 0.22.1 (2026) in
    the `v1/nixl/` package after the split."""
    ix = origins.load()
    base = "distributed/kv_transfer/kv_connector/v1/"
    assert _defs(ix, "NixlConnectorWorker.get_finished", "0.11.0") == {base + "nixl_connector.py"}
    assert _defs(ix, "NixlConnectorWorker.get_finished", "0.22.1") == {base + "nixl/worker.py"}


@pytest.mark.parametrize(
    ("release", "file"),
    [("0.11.0", "v1/nixl_connector.py"), ("0.22.1", "v1/nixl/worker.py")],
)
def test_a_logger_location_is_read_in_the_logs_own_release(release: str, file: str):
    ix = origins.load()
    o = next(
        o
        for o in ix.origins
        if o.function == "NixlConnectorWorker.get_finished"
        and (o.template or "").startswith("Releasing expired")
        and release in o.releases
    )
    line = o.line_in(release)
    assert line is not None and o.file.endswith(file)
    msg = (o.text or "").replace("...", "7", 1).replace("...", "0", 1).replace("...", "120")
    log = (
        f"INFO 01-01 00:00:00 [api_server.py:1] vLLM API server version {release}\n"
        f"WARNING 01-01 00:00:01 [{file.rsplit('/', 1)[-1]}:{line}] {msg}\n"
    )
    r = triage.triage_text(log)
    hit = [ll.origin for ll in r.located if ll.origin.how == "logger"]
    assert hit and hit[0].exact and hit[0].file.endswith(file) and hit[0].line == line


# --- values -------------------------------------------------------------------------------------


def test_placeholders_are_named_and_typed_from_the_source():
    src = (
        "def f(self, req_id, count, port):\n"
        "    logger.warning('Releasing %s by %d worker(s) in %d seconds', req_id, count, envs.X_TIMEOUT)\n"
        "    raise RuntimeError(f'{len(self.reqs)} to {self.side_channel_host}:{port} after {t:.1f}')\n"
    )
    got = {s.kind: s.holes for s in statements(src) if s.kind != "def"}
    assert [(h.name, h.type) for h in got["log"]] == [
        ("req_id", "id"),
        ("count", "count"),
        ("envs.X_TIMEOUT", "seconds"),
    ]
    assert [h.type for h in got["raise"]] == ["count", "host", "port", "float"]


def _classes(text: str) -> list[tuple[str, str]]:
    return [(v.cls, v.confidence) for v in triage.triage_text(text).verdicts]


HEADER = "WARNING 09-24 16:35:21 [nixl_connector.py:1048] "


def test_zero_reads_repeated_is_a_decode_that_never_connected():
    """vllm#30153 (0.11.0, side channel on localhost): every request expires unread."""
    text = "".join(f"{HEADER}{EXPIRED_0.replace('cmpl-3da2', f'cmpl-{i}')}\n" for i in range(3))
    assert ("kv-never-read-by-decode", "possible") in _classes(text)


def test_zero_reads_lookalikes():
    one = f"{HEADER}{EXPIRED_0}\n"
    assert "kv-never-read-by-decode" not in {c for c, _ in _classes(one)}  # one abort
    late = one * 3 + (
        "ERROR 09-24 16:35:40 [nixl_connector.py:1101] Potentially invalid KV blocks for unrecognized "
        "request cmpl-3da205a6-1c3c-41b5-aeaa-b8421e81fd5c-0 were retrieved by a decode worker. They may "
        "have expired.\n"
    )  # the decode did read, late (vllm PR #25808's line): a lease, not a missing connection
    got = {c for c, _ in _classes(late)}
    assert "kv-never-read-by-decode" not in got and "kv-lease-expired" in got


def test_some_reads_is_a_slow_decode_not_a_missing_connection():
    slow = "".join(f"{HEADER}{EXPIRED_0.replace('by 0 decode', 'by 1 decode')}\n" for _ in range(3))
    got = dict(_classes(slow))
    assert got.get("kv-lease-expired") == "possible" and "kv-never-read-by-decode" not in got


# --- what changed there -------------------------------------------------------------------------


def test_the_next_change_of_a_function_is_its_diff(tmp_path: Path):
    v1 = "def f(x):\n    if x:\n        raise ValueError('bad value %d' % x)\n    return x\n"
    v2 = "def f(x):\n    # a comment\n    if x:\n        raise ValueError('bad value %d' % x)\n    return x\n"
    v3 = "def f(x):\n    if x < 0:\n        raise ValueError('bad value %d' % x)\n    return x + 1\n"
    doc: dict = {}
    for rel, src in (("1.0.0", v1), ("1.1.0", v2), ("1.2.0", v3)):
        build.add_release(doc, "pkg", rel, [("m.py", src)])
    build.sort_releases(doc)
    assert build.finish(doc) == 1  # a comment is no change; 1.2.0 changed the code
    ix = origins.OriginIndex(build.loads(build.dumps(doc)))
    o = next(o for o in ix.origins if o.kind == "raise")
    ch = ix.change_after(o, "1.0.0")
    assert ch is not None and ch.release == "1.2.0" and ch.kind == "changed"
    assert ch.diff is not None and "+    if x < 0:" in ch.diff and "-    if x:" in ch.diff
    assert ix.change_after(o, "1.2.0") is None


def test_the_hunk_nearest_the_statement_is_shown():
    old = "".join(f"    a{i} = {i}\n" for i in range(40))
    new = old.replace("a3 = 3", "a3 = 30").replace("a30 = 30", "a30 = 300")
    d = build.diff("def f():\n" + old, "def f():\n" + new)
    assert d.count("@@") == 4  # two hunks
    near_end = nearest_hunk(d, 31)
    assert "+    a30 = 300" in near_end and "a3 = 30\n" not in near_end and "1 other hunk" in near_end
    assert "+    a3 = 30" in nearest_hunk(d, 4)


def test_every_data_file_of_the_folder_is_merged(tmp_path: Path):
    a: dict = {}
    build.add_release(a, "vllm", "0.1.0", [("x.py", "def f():\n    raise ValueError('vllm line here!!')\n")])
    b: dict = {}
    build.add_release(
        b, "ucx", "1.0.0", [("y.py", "def g():\n    raise OSError('a ucx line, long enough')\n")]
    )
    (tmp_path / "index.json.gz").write_bytes(build.dumps(a))
    (tmp_path / "others-ucx.json.gz").write_bytes(build.dumps(b))
    ix = origins.OriginIndex(origins.packaged_doc(tmp_path))
    assert set(ix.releases) == {"vllm", "ucx"}
    assert ix.match("a ucx line, long enough") is not None


# --- public threads -----------------------------------------------------------------------------


def test_threads_match_by_template_and_rank_by_certainty():
    from vllm_pd_doctor.results.triage import Evidence

    ev = Evidence("-", 1, EXPIRED_0)
    got = thread_match.nearest([ev], "0.11.0", folder=THREADS)
    assert [m.url.rsplit("/", 1)[-1] for m in got] == ["30153", "25562"]  # reporter-confirmed before open
    assert not thread_match.nearest([Evidence("-", 1, EXPIRED_0.replace("by 0", "by 1"))], folder=THREADS)
    for t in thread_index.load(THREADS):  # every entry: its quote matches, its lookalike does not
        for q in t.lines:
            assert thread_index.match(q.template, q.quoted) is not None
            assert thread_index.match(q.template, q.lookalike) is None


def test_an_established_thread_is_a_likely_verdict_and_a_class_stays_first(monkeypatch: pytest.MonkeyPatch):
    from vllm_pd_doctor.results.triage import Evidence

    monkeypatch.setattr(thread_match, "FOLDER", THREADS)
    late = (
        "Potentially invalid KV blocks for unrecognized request 8f07dfc0-...-a2f0e657 were retrieved by a "
        "decode worker. They may have expired.\n"
    )
    r = triage.triage_text(late)  # aws-do-eks#84 quotes it (fix merged), but the catalogue knows it
    assert [v.cls for v in r.verdicts][:1] == ["kv-lease-expired"]
    other = triage.triage_text(f"{EXPIRED_0}\n")  # no class: the threads that quote it, none established
    assert not any(v.cls.startswith("thread:") for v in other.verdicts)
    assert other.unknown is not None and [t.url.rsplit("/", 1)[-1] for t in other.unknown.threads] == [
        "30153",
        "25562",
    ]
    # the aws-do-eks#84 thread names the class: no verdict of its own
    assert thread_match.verdict(thread_match.nearest([Evidence("-", 1, late)], folder=THREADS)) is None
    assert thread_match.verdict(other.unknown.threads) is None  # reporter-confirmed, open: not established


def test_a_thread_verdict_needs_an_established_cause_no_class_and_its_package():
    from dataclasses import replace

    from vllm_pd_doctor.results.triage import Evidence

    best = thread_match.nearest([Evidence("-", 1, EXPIRED_0)], folder=THREADS)[0]
    sure = replace(best, certainty="fix-merged", cls=None)  # as if its fix had merged and no class knew it
    v = thread_match.verdict([sure], lambda _e: "vllm")
    assert v is not None and v.confidence == "likely" and v.cls == "thread:vllm-project/vllm#30153"
    assert v.references == (best.url,) and v.side == "prefill"
    assert thread_match.verdict([sure], lambda _e: "mooncake") is None  # another package's code wrote it
    assert thread_match.verdict([sure]) is None  # a line the index does not place
    assert thread_match.verdict([replace(sure, cls="kv-never-read-by-decode")], lambda _e: "vllm") is None


def test_a_bad_thread_data_file_gives_no_threads_not_a_crash(tmp_path: Path):
    from vllm_pd_doctor.results.triage import Evidence

    (tmp_path / "half-written.jsonl").write_text('{"url": "https://x"\n', encoding="utf-8")
    assert thread_match.nearest([Evidence("-", 1, EXPIRED_0)], folder=tmp_path) == ()


def test_a_logger_line_wrapped_in_the_paste_is_joined():
    """aws-samples/aws-do-eks PR #84 posts the prefill's warning wrapped after `for request`."""
    text = (
        "WARNING 08-16 08:09:07 [worker.py:2967] Releasing expired KV blocks for request\n"
        "        8f07dfc0-...-a2f0e657 which were retrieved by 0 remote worker(s) before lease expired.\n"
    )
    r = triage.triage_text(text)
    got = [ll.origin for ll in r.located if ll.evidence.line == 2]
    assert got and "Releasing expired KV blocks" in (got[0].template or "")
    assert ("count", "0") in {(v.name, v.text) for v in got[0].values}


def test_an_assert_line_quoted_alone_is_located_by_its_test():
    """Threads quote the statement without its frame (`assert req_id in self.requests`, vllm#46240)."""
    r = triage.triage_text("assert len(local_block_descs_ids) == len(remote_block_descs_ids)\n")
    o = r.located[0].origin
    assert (
        o.kind == "assert" and o.function.endswith(("_read_blocks", "_xfer_blocks")) and o.how == "statement"
    )
    assert any("v1/nixl_connector.py:NixlConnectorWorker._read_blocks" in a for a in o.also)  # 0.9 - 0.19
    assert not triage.triage_text("assert len(local_ids) == len(remote_ids)\n").located  # another test


def test_a_message_cut_inside_its_text_is_located():
    """A thread quotes `RuntimeError: Remote NIXL agent engine ID mismatch.` (the rest cut)."""
    r = triage.triage_text("RuntimeError: Remote NIXL agent engine ID mismatch.\n")
    assert r.located and "engine ID mismatch" in (r.located[0].origin.template or "")
    assert not triage.triage_text("RuntimeError: Remote NIXL agent\n").located  # too little of it


def test_a_class_keyed_to_the_nixl_package_fits_the_module_it_was_split_from():
    from vllm_pd_doctor.triage.catalogue import Code
    from vllm_pd_doctor.triage.entries_transport import NIXL_DIR

    ix = origins.load()
    code = Code(NIXL_DIR, "get_finished", kind="log", words="Releasing expired KV blocks")
    homes = {o.file for o in ix.origins if code.fits(o)}
    base = "distributed/kv_transfer/kv_connector/v1/"
    assert base + "nixl_connector.py" in homes and base + "nixl/worker.py" in homes
    assert all(f.startswith(base + "nixl") for f in homes)
    other = Code(NIXL_DIR, "get_finished")
    assert not any(other.fits(o) for o in ix.origins if o.file.startswith(base + "lmcache"))
