"""report --prefill-url/--decode-url: a `pd-doctor status` snapshot of recorded real engines in the
bundle, in public form (fast tier; the engines' answers are served as tests/status/test_status.py does)."""

from __future__ import annotations

import json
import sys

from tests.status.test_status import recorded_pair


def test_report_adds_the_status_snapshot_public(cli, tmp_path):
    out = tmp_path / "bundle"
    with recorded_pair("b-version-block-mismatch") as args:
        urls = args[:4]  # --prefill-url URL --decode-url URL (report does not take side channels)
        proc = cli("report", "--python", sys.executable, "-o", str(out), "--quiet", "--no-repro", *urls)
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads((out / "report.json").read_text())
    st = doc["status"]
    assert st["collected"] is True, st
    snap = st["value"]
    assert snap["schema_version"] == 1 and snap["healthy"] is False
    assert sorted(e["vllm_version"] for e in snap["engines"]) == ["0.28.0", "0.32.0"]
    assert "exposed-53514" in {f["id"] for f in snap["findings"]}
    text = json.dumps(st)
    assert "127.0.0.1" not in text and "/root/" not in text  # URLs and model paths stay out
    md = (out / "report.md").read_text()
    assert "#### Running deployment (pd-doctor status)" in md and "`exposed-53514`" in md


def test_report_without_urls_has_no_status_and_bad_url_is_one_line(cli, tmp_path):
    out = tmp_path / "b"
    proc = cli("report", "--python", sys.executable, "-o", str(out), "--quiet", "--no-repro")
    assert proc.returncode == 0, proc.stderr
    assert "status" not in json.loads((out / "report.json").read_text())
    bad = cli("report", "--python", sys.executable, "-o", str(tmp_path / "c"), "--decode-url", "ftp://x")
    assert bad.returncode == 2 and "Traceback" not in bad.stderr and "--decode-url" in bad.stderr
