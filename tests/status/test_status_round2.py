"""`pd-doctor status` round 2 (issue 35), fast tier: deltas not totals, a silent side channel, a
partial answer, the table at 80/120 columns. Recorded real engines (tests/fixtures/status) served
as tests/status/test_status.py serves them."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator
from contextlib import contextmanager

from tests.status.test_status import (
    FIX,
    found,
    judge_case,
    pages_for,
    recorded_pair,
    run_cli,
    serve,
    side_channel,
)
from vllm_pd_doctor.formats import OutputFormat, emit
from vllm_pd_doctor.formats.status import short
from vllm_pd_doctor.knowledge.facts import metrics as km
from vllm_pd_doctor.status import core, record

LEASE = ("vllm:nixl_num_kv_expired_reqs_total", ())
LATE = ("vllm:nixl_num_notifications_after_expiry_total", ())


def test_a_total_from_before_the_window_is_context_not_a_finding() -> None:
    for case in ("a-after-expiry", "a-decode-killed"):  # recorded after a-lease-expiry's late read
        wins, _, _ = record.replay(FIX / case)
        p = next(w for w in wins if w.role == "prefill")
        r = judge_case(case)
        assert "kv-lease-expired" not in found(r), (case, r.findings)
        old = 0
        for name, what in ((km.EXPIRED, "expired KV leases"), (km.AFTER_EXPIRY, "notifications after")):
            total = p.now(name, "counter")
            assert p.delta(name) == 0, case  # nothing in the window
            if total:
                old += 1
                want = f"{total:g} {what}"
                assert any(want in n and "none in this window" in n for n in r.notes), (case, r.notes)
        assert old, case  # the recorded prefill had an expiry before this window
    # the decode-only window of the issue: the same old totals on the prefill, requests to D alone
    wins, eps, _ = record.replay(FIX / "a-decode-only")
    p = next(w for w in wins if w.role == "prefill")
    for sc in (p.before, p.after):
        sc.samples[LEASE], sc.samples[LATE] = 3.0, 2.0
    got = core.judge(wins, eps, interval=4, elapsed=4)
    assert "kv-lease-expired" not in found(got) and "not-disaggregating" in found(got)
    p.after.samples[LATE] = 3.0  # one in the window: the finding, with the total as context
    f = next(f for f in core.judge(wins, eps, interval=4, elapsed=4).findings if f.id == "kv-lease-expired")
    assert f.severity == "error" and f.title.startswith("1 notification(s) after lease expiry")
    assert any(ev.value.startswith("+1 over") and "(since start: 3)" in ev.value for ev in f.evidence)


def test_a_window_without_traffic_says_so() -> None:
    idle, busy = judge_case("a-healthy-idle"), judge_case("a-healthy-traffic")
    assert idle.traffic is False and any(n.startswith("no traffic in this window") for n in idle.notes)
    assert busy.traffic is True and not any(n.startswith("no traffic") for n in busy.notes)
    assert "no traffic" in emit(idle, OutputFormat.table, width=120)
    assert json.loads(emit(idle, OutputFormat.json))["traffic"] is False


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def hung() -> Iterator[str]:
    """A port that accepts connections and never answers (an engine whose API server hangs)."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(16)
    try:
        yield f"http://127.0.0.1:{s.getsockname()[1]}"
    finally:
        s.close()


@contextmanager
def prefill_only(case: str) -> Iterator[list[str]]:
    meta = json.loads((FIX / case / "meta.json").read_text())["engines"][0]
    with (
        serve(pages_for(case, meta["stem"], meta)) as pu,
        side_channel((FIX / case / meta["side_file"]).read_bytes()) as ps,
    ):
        yield ["--prefill-url", pu, "--prefill-side-channel", f"127.0.0.1:{ps}"]


def test_a_dead_or_hung_decode_is_a_finding_and_the_prefill_is_still_judged() -> None:
    for decode, kind in (("http://127.0.0.1:1", "dead"), (None, "hung")):
        with prefill_only("b-version-block-mismatch") as args, hung() as slow:
            d = ["--decode-url", decode or slow]
            r = run_cli(*args, *d, "--interval", "0.5", "--timeout", "1", "--format", "json")
        assert r.returncode == 3, (kind, r.stderr)
        doc = json.loads(r.stdout)  # printed all the same: a monitoring script gets the report
        by = {e["role"]: e for e in doc["engines"]}
        assert by["decode"]["down"] == kind and by["prefill"]["down"] is None
        assert by["prefill"]["version"] == "0.28.0" and by["prefill"]["handshake"]["compatibility_hash"]
        ids = {f["id"] for f in doc["findings"]}
        assert f"engine-{kind}" in ids and "exposed-53514" in ids, ids  # the prefill, judged
        assert not doc["comparisons"]


def test_a_silent_side_channel_is_its_own_warning_and_compares_as_unknown() -> None:
    with recorded_pair("b-version-block-mismatch") as args:
        args[args.index("--decode-side-channel") + 1] = f"127.0.0.1:{_free_port()}"  # nothing listens
        r = run_cli(*args, "--interval", "0.5", "--timeout", "1", "--format", "json")
        table = run_cli(*args, "--interval", "0.5", "--timeout", "1")
    doc = json.loads(r.stdout)
    f = next(f for f in doc["findings"] if f["id"] == "side-channel-unanswered")
    assert f["severity"] == "warning" and f["title"].startswith("nothing listens on the decode's NIXL")
    assert 'sent (b"get_meta_msg", 0, 0): connection refused' in f["evidence"][0]["value"]
    rows = {c["field"]: c["same"] for c in doc["comparisons"]}
    assert rows["compatibility_hash"] is None and rows["block_size"] is None
    assert rows["kv_cache_layout"] is None
    assert not {"nixl-hash-mismatch", "block-size-mismatch", "kv-layout-mismatch"} & {
        x["id"] for x in doc["findings"]
    }
    assert rows["vllm_version (/version)"] is False  # what both sides did answer still compares
    for field in ("compatibility_hash", "block_size", "kv_cache_layout"):
        line = next(ln for ln in table.stdout.splitlines() if ln.lstrip("│ ").startswith(field))
        assert "unknown" in line and "DIFFERENT" not in line, line


def test_a_side_channel_that_is_not_nixl() -> None:
    with recorded_pair("a-healthy-idle") as args, side_channel(b"\x93\x01\x02\x03") as junk:
        args[args.index("--decode-side-channel") + 1] = f"127.0.0.1:{junk}"
        r = run_cli(*args, "--interval", "0.5", "--format", "json")
    f = next(f for f in json.loads(r.stdout)["findings"] if f["id"] == "side-channel-unanswered")
    assert "not as NIXL does" in f["title"] and "not a NIXL handshake payload" in f["evidence"][0]["value"]


def test_table_readable_at_80_and_120_columns() -> None:
    for case in ("b-version-block-mismatch", "a-lease-expiry"):
        r = judge_case(case)
        for width in (80, 120):
            text = emit(r, OutputFormat.table, width=width)
            assert "…" not in text, (case, width)
            assert max(len(ln) for ln in text.splitlines()) <= width
            for e in r.engines:
                for k, _ in e.key_values:
                    assert short(k) in text
        # one window figure: the header's is the evidence's
        head = text.splitlines()[0]
        assert f"window {r.window_s:.1f} s" in head and f"{r.interval_s:g} s" not in head.split("took")[0]
        for f in r.findings:
            for ev in f.evidence:
                if " over " in ev.value:
                    assert f"over {r.window_s:.1f} s" in ev.value, (ev.value, r.window_s)
        md = emit(r, OutputFormat.markdown)
        assert "vllm:prompt_tokens_total" in md or "vllm:nixl" in md  # full names outside the table


def test_short_labels_are_unambiguous() -> None:
    names = [n + s for n in km.USED for s in ("_total", "_count", "")]
    labels = {short(n) for n in names}
    full = {n.removesuffix("_total").removesuffix("_count") for n in names}
    assert len(labels) == len(full)
    assert short('vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}') == (
        "prompt tokens by source [external_kv_transfer]"
    )
    assert short("vllm:nixl_num_failed_transfers_total") != short("vllm:nixl_num_failed_notifications_total")


def test_interval_0_names_one_flag() -> None:
    r = run_cli("--prefill-url", "http://h:1", "--decode-url", "http://h:2", "--interval", "0")
    assert r.returncode == 2 and "--interval 0" in r.stderr and "--timeout" not in r.stderr


def test_filtered_parse_reads_what_the_full_parse_reads() -> None:
    """status parses only the families it reads; on every recorded real /metrics text those
    families come out exactly as prometheus_client's parse of the whole text gives them."""
    from vllm_pd_doctor.status import scrape

    def base(n: str) -> str:
        for s in scrape._SUFFIXES:
            if n.endswith(s) and n[: -len(s)] in km.USED:
                return n[: -len(s)]
        return n

    texts = [t for f in sorted(FIX.glob("*/*.metrics.txt")) if (t := f.read_text())]
    assert len(texts) >= 10
    for t in texts:
        full, info = scrape.parse_metrics(t, all_families=True)
        mine, mine_info = scrape.parse_metrics(t)
        want = {k: v for k, v in full.items() if base(k[0]) in km.USED or k[0].startswith("vllm:nixl_")}
        assert mine == want and len(mine) < len(full)
        assert mine_info == {k: v for k, v in info.items() if k in km.USED}


def test_a_silent_side_channel_costs_no_time_beyond_the_interval() -> None:
    """The probe runs while the interval runs: status with a side channel that never answers
    (timeout 3 s) and a 3 s interval takes about 3 s, not 6 (relation, not a CPU's figure)."""
    import time

    with recorded_pair("a-healthy-idle") as args:
        p_side = ("127.0.0.1", int(args[5].rsplit(":", 1)[1]))
        with hung() as mute:  # accepts the connection, never speaks (not even zmq's greeting)
            eps = [
                core.Endpoint("prefill", args[1], p_side),
                core.Endpoint("decode", args[3], ("127.0.0.1", int(mute.rsplit(":", 1)[1]))),
            ]
            t0 = time.monotonic()
            r = core.run_status(eps, 3.0, timeout=3.0)
            took = time.monotonic() - t0
    f = next(f for f in r.findings if f.id == "side-channel-unanswered")
    assert "does not answer within 3 s" in f.title, f.title
    assert took < 3.0 + 3.0 - 0.5, took  # the probe's timeout overlapped the interval


def test_leases_expiring_for_a_decode_without_connector_say_why() -> None:
    r = judge_case("b-decode-without-connector")  # real: P->D2 traffic, D2 started without a connector
    f = next(f for f in r.findings if f.id == "kv-lease-expired")
    assert f.fix.startswith("start the decode with --kv-transfer-config")
    assert any(ev.metric == "vllm:nixl_*" and "never reads" in ev.value for ev in f.evidence)
    g = next(f for f in judge_case("a-lease-expiry").findings if f.id == "kv-lease-expired")
    assert g.fix.startswith("raise kv_lease_duration")  # a decode with NIXL that reads late
