"""`pd-doctor triage` on lines other programs than vLLM write (UCX, NIXL's C++ core, llm-d's Go
sidecar): one-line logs as those programs print them, each located at its origin in the others
index (knowledge/origins/others.json.gz), and lookalikes that must not be."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from vllm_pd_doctor import triage
from vllm_pd_doctor.cli import app
from vllm_pd_doctor.knowledge.origins import REPOSITORY
from vllm_pd_doctor.triage.reader import normalise
from vllm_pd_doctor.triage.scan import HEAD_BYTES

UCX_LINE = (
    "[1750835683.514002] [TENCENT64:1392 :0]          select.c:649  UCX  ERROR   no active messages "
    "transport to <no debug data>: rc_verbs/mlx5_bond_1:1 - Destination is unreachable, "
    "rc_mlx5/mlx5_bond_1:1 - Destination is unreachable"
)
"""openucx/ucx#10738 (ucx_perftest over a bond device, 2025-06-25), verbatim."""
UCX_AVX_LINE = "[vllm-decode-0:4127] FATAL: UCX library was compiled with avx but CPU does not support it."
"""ai-dynamo/nixl#2119 (bundled UCX on a CPU without AVX), the issue's `[<host>:<pid>]` filled in."""
NIXL_LINE = "E0421 11:56:59.775353  709103 nixl_agent.cpp:322] createBackend: unsupported backend 'UCX'"
"""ai-dynamo/nixl#1561 (UCX plugin path wrong), verbatim."""
GO_LINE = (
    'E0709 10:50:42.153947   75821 proxy.go:148] "waiting for vLLM to be ready" '
    'err="dial tcp [::1]:8001: connect: connection refused" logger="proxy server"'
)
"""llm-d/llm-d-routing-sidecar PR #40 (klog line of the sidecar when vLLM is not up), verbatim."""


ZAP_LINE = json.dumps(
    {
        "level": "error",
        "ts": "2026-01-26T07:30:35Z",
        "logger": "proxy server on port 8000",
        "msg": "http: proxy error",
        "decoderURL": "http://localhost:8200",
        "error": "context canceled",
        "stacktrace": "github.com/llm-d/llm-d-inference-scheduler/pkg/sidecar/proxy.(*Server).createRoutes."
        "(*Server).createDecoderProxyHandler.func2\n\t/workspace/pkg/sidecar/proxy/proxy_helpers.go:117\n"
        "net/http/httputil.(*ReverseProxy).ServeHTTP\n\t/usr/local/go/src/net/http/httputil/reverseproxy.go:486",
    }
)
"""llm-d/llm-d#633 (the newer pd-sidecar logs zap JSON), its stack trace cut to two frames."""


def _triage(tmp_path: Path, line: str) -> dict:
    p = tmp_path / "one.log"
    p.write_text(line + "\n", encoding="utf-8")
    got = CliRunner().invoke(app, ["triage", str(p), "-f", "json"])
    assert got.exit_code in (0, 1), got.output
    doc: dict = json.loads(got.stdout)
    return doc


def _located(tmp_path: Path, line: str) -> list[dict]:
    located: list[dict] = _triage(tmp_path, line)["located"]
    return located


@pytest.mark.parametrize(
    ("line", "package", "file", "function", "template"),
    [
        (
            UCX_LINE,
            "ucx",
            "src/ucp/wireup/select.c",
            "ucp_wireup_select_transport",
            "no {title} transport to {name}: {tls_info}",
        ),
        (
            UCX_AVX_LINE,
            "ucx",
            "src/ucs/sys/init.c",
            "ucs_check_cpu_flags",
            "[{ucs_get_host_name()}:{getpid()}] FATAL: UCX library was compiled with {flag} but CPU",
        ),
        (
            NIXL_LINE,
            "libnixl",
            "src/core/nixl_agent.cpp",
            "nixlAgent::createBackend",
            "createBackend: unsupported backend '{type}'",
        ),
        (
            GO_LINE,
            "llm-d-routing-sidecar",
            "internal/proxy/proxy.go",
            "Server.createRoutes",
            "waiting for vLLM",
        ),
    ],
    ids=["ucx", "ucx-avx", "nixl-cpp", "go-klog"],
)
def test_a_one_line_log_is_located_at_its_origin(tmp_path: Path, line, package, file, function, template):
    doc = _triage(tmp_path, line)
    located = doc["located"]
    assert len(located) == 1, located
    o = located[0]["origin"]
    assert (o["package"], o["file"], o["function"]) == (package, file, function)
    assert o["template"].startswith(template)
    assert o["releases"] and o["condition"]  # a release range and the guarding test
    if doc["unknown"]:  # no catalogue class: the upstream search goes to the package's repository
        name = re.split(r"\.|::", function)[-1]
        assert doc["unknown"]["search"].startswith(f"repo:{REPOSITORY[package]} {name}")


def test_a_zap_json_line_is_located_by_its_stack_frame(tmp_path: Path):
    """`http: proxy error` is in the old routing sidecar and in the scheduler's pd-sidecar alike; the
    stack trace's first frame (proxy_helpers.go:117) picks the one that wrote it."""
    located = _located(tmp_path, ZAP_LINE)
    assert len(located) == 1, located
    o = located[0]["origin"]
    assert (o["package"], o["file"]) == ("llm-d-inference-scheduler", "pkg/sidecar/proxy/proxy_helpers.go")
    assert o["function"] == "Server.createDecoderProxyHandler" and o["how"] == "logger"


def test_lookalikes_are_not_located(tmp_path: Path):
    # openucx/ucx#10738, the next line: perftest's own error (src/tools/perf, not indexed)
    perf = (
        "[1750835683.514020] [TENCENT64:1392 :0]         libperf.c:1183 UCX  ERROR ucp_ep_create() "
        "failed: Destination is unreachable"
    )
    assert _located(tmp_path, perf) == []
    # the same file and words, another message (a crafted lookalike of select.c's template)
    other = (
        "[1750835683.514002] [TENCENT64:1392 :0]          select.c:649  UCX  ERROR   no transport selected"
    )
    assert _located(tmp_path, other) == []
    # a klog INFO line of the sidecar: not an alert line, never normalised past the head
    assert _located(tmp_path, GO_LINE.replace("E0709", "I0709", 1)) == []


def test_ucx_and_glog_prefixes_are_read():
    r = normalise(UCX_LINE, "x", 1)
    assert (r.level, r.src, r.ts) == ("ERROR", "select.c:649", "06-25 07:14:43")
    assert r.msg.startswith("no active messages transport to")
    warn = "[1746690477.974497] [llm206:611  :0]     ucp_context.c:1268 UCX  WARN  transports 'cuda_ipc'"
    assert normalise(warn, "x", 1).level == "WARNING"  # LMCache/LMCache#605
    fatal = normalise(UCX_AVX_LINE, "x", 1)
    assert (fatal.level, fatal.msg) == ("CRITICAL", UCX_AVX_LINE)  # the bracket is its format's
    g = normalise(GO_LINE, "x", 1)
    assert (g.level, g.src) == ("ERROR", "proxy.go:148") and g.msg.startswith('"waiting for vLLM')


def test_a_native_alert_past_the_head_is_located(tmp_path: Path):
    """Past the head only trigger words pick lines: a glog/klog E line holds none of them."""
    p = tmp_path / "sidecar.log"
    filler = 'I0709 10:50:41.000000   75821 proxy.go:120] "ok" path="/v1/completions"\n'
    with p.open("w", encoding="utf-8") as f:
        f.write(filler * (HEAD_BYTES // len(filler) + 100))
        f.write(NIXL_LINE + "\n" + GO_LINE + "\n")
    r = triage.triage([triage.LogInput(str(p))])
    where = {ll.origin.function for ll in r.located}
    assert {"nixlAgent::createBackend", "Server.createRoutes"} <= where


def test_the_logger_line_picks_the_release_s_statement():
    """ai-dynamo/dynamo#12952 (NIXL 1.3.1's telemetry bug): `getXferTelemetry: cannot return values ...`
    is written from two conditions across NIXL releases; nixl_agent.cpp:1291 is 1.3.1's (and 1.4.0's)."""
    fix = Path(__file__).resolve().parents[1] / "fixtures" / "triage" / "dynamo-12952-telemetry-decode.log"
    r = triage.triage([triage.LogInput(str(fix))])
    o = next(ll.origin for ll in r.located if ll.evidence.line == 1)
    assert o.package == "libnixl" and o.function == "nixlAgent::getXferTelemetry" and o.how == "logger"
    assert o.condition == "!data->telemetry_" and o.releases.startswith("1.3.1")


def test_every_native_alert_line_of_the_fixtures_is_located():
    """Every UCX, glog (NIXL's C++, Mooncake) or klog ERROR/WARNING line of the real public fixtures
    has its origin in the others index (the vLLM lines have their own test in tests/knowledge)."""
    fix = Path(__file__).resolve().parents[1] / "fixtures" / "triage"
    lines = []
    for f in sorted(fix.glob("*.log")):
        for i, text in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            rec = normalise(text, f.name, i)
            src = (rec.src or "").split(":")[0]
            if rec.level in ("ERROR", "WARNING", "CRITICAL") and src.endswith((".c", ".cpp", ".go")):
                lines.append((f, i, rec.msg))
    assert len(lines) >= 15
    missing = []
    for f, i, msg in lines:
        got = {ll.evidence.line: ll.origin for ll in triage.triage([triage.LogInput(str(f))]).located}
        o = got.get(i)
        if o is None or o.package in ("vllm", "nixl"):
            missing.append(f"{f.name}:{i}: {msg[:80]}")
    assert missing == []
