"""`repro --engine live --prefill-url`: the remote client's HTTP handling (no engines).

These exercise the client side only (URL checks, block size from /metrics, death detection,
the notes) against stand-in HTTP endpoints shaped like vLLM's API; the verdict against a real
0.28.0 prefill engine is asserted in test_live.py (test_remote_probe_kills_a_real_buggy_prefill).
The stand-in prefill endpoint answers HTTP 500 and turns /health 503 on the second request of the
same P-side prompt; the decode endpoint answers and exposes NIXL metrics.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from vllm_pd_doctor.infra.errors import BadInput, CouldNotRun
from vllm_pd_doctor.repro import live
from vllm_pd_doctor.repro.live import engines, evidence, options

BLOCK = 32


class FakeEngine:
    def __init__(self, role: str, buggy: bool, block_in_metrics: bool = True) -> None:
        self.role = role
        self.buggy = buggy
        self.block_in_metrics = block_in_metrics
        self.dead = False
        self.seen: list[tuple[int, ...]] = []
        self.transfers = 0
        engine = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _send(self, code: int, body: Any, ctype: str = "application/json") -> None:
                data = body.encode() if isinstance(body, str) else json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", ctype)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:
                if self.path == "/health":
                    self._send(503 if engine.dead else 200, {})
                elif self.path == "/v1/models":
                    self._send(200, {"data": [{"id": "fake-model"}]})
                elif self.path == "/metrics":
                    self._send(200, engine.metrics(), "text/plain")
                else:
                    self._send(404, {})

            def do_POST(self) -> None:
                n = int(self.headers.get("Content-Length", "0"))
                req = json.loads(self.rfile.read(n))
                self._send(*engine.complete(req))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def metrics(self) -> str:
        info = (
            f'vllm:cache_config_info{{block_size="{BLOCK}",engine="0"}} 1.0\n'
            if self.block_in_metrics
            else ""
        )
        return (
            info + f"vllm:nixl_bytes_transferred_sum {4096.0 * self.transfers}\n"
            f"vllm:nixl_bytes_transferred_count {float(self.transfers)}\n"
            "vllm:nixl_num_failed_transfers_total 0.0\n"
        )

    def complete(self, req: dict[str, Any]) -> tuple[int, Any]:
        if self.dead:
            return 500, {"error": {"message": "EngineDeadError"}}
        prompt = tuple(req["prompt"])
        kv = req.get("kv_transfer_params") or {}
        if self.role == "prefill" and kv.get("do_remote_decode"):
            if self.buggy and prompt in self.seen and (len(prompt) - 1) % BLOCK == 0:
                self.dead = True
                return 500, {"error": {"message": "EngineCore encountered an issue."}}
            self.seen.append(prompt)
            return 200, {
                "choices": [{"token_ids": [7]}],
                "kv_transfer_params": {"do_remote_prefill": True, "remote_block_ids": [[1]]},
            }
        if kv.get("do_remote_prefill"):
            self.transfers += 1
        return 200, {"choices": [{"token_ids": [5, 6, 7, 8]}]}


@pytest.fixture
def pair(request: pytest.FixtureRequest) -> Iterator[tuple[FakeEngine, FakeEngine]]:
    buggy, block_in_metrics = request.param if isinstance(request.param, tuple) else (request.param, True)
    p, d = FakeEngine("prefill", buggy, block_in_metrics), FakeEngine("decode", False)
    for e in (p, d):
        e.thread.start()
    yield p, d
    for e in (p, d):
        e.server.shutdown()
        e.server.server_close()


def _opts(p_url: str, d_url: str | None = None, block_size: int | None = None) -> live.LiveOptions:
    """Through the same adapter the repro command uses."""
    return live.from_repro_options(
        connector="nixl",
        block_size=block_size,
        prompt_len=None,
        mamba_cache_mode=None,
        kv_role="kv_producer",
        model=None,
        prefill_url=p_url,
        decode_url=d_url,
        confirm_remote=False,
        run_dir=None,
        prefill_port=None,
        decode_port=None,
        device=None,
        timeout=60,
    )


@pytest.mark.parametrize("pair", [True], indirect=True)
def test_remote_buggy_prefill_dies(pair: tuple[FakeEngine, FakeEngine]) -> None:
    p, d = pair
    report = live.run_live("python", _opts(p.url, d.url), lambda _: None)
    v = report.results[0]
    assert p.dead
    assert v.config is not None and v.config.block_size == BLOCK
    assert v.config.prompt_len == BLOCK + 1
    # died; without the engine's log or trace the assertion itself cannot be confirmed
    assert v.assertion is not None and v.assertion.fired and not v.assertion.matches_53514
    assert report.reproduced
    assert any("was killed by this probe" in n for n in report.notes)
    assert any("NIXL bytes 4096.0" in n for n in report.notes)


@pytest.mark.parametrize("pair", [False], indirect=True)
def test_remote_fixed_prefill_survives(pair: tuple[FakeEngine, FakeEngine]) -> None:
    p, d = pair
    report = live.run_live("python", _opts(p.url, d.url), lambda _: None)
    v = report.results[0]
    assert not p.dead
    assert v.assertion is not None and v.assertion.fired is False
    assert v.truncation is not None and v.truncation.hook == "unknown"
    assert any("survived" in n for n in report.notes)


def test_non_loopback_needs_confirmation() -> None:
    with pytest.raises(BadInput, match="kill the prefill engine"):
        live.run_live("python", _opts("http://10.9.8.7:8000"), lambda _: None)


@pytest.mark.parametrize("pair", [True], indirect=True)
def test_block_size_that_disagrees_with_metrics_is_warned_and_metrics_win(
    pair: tuple[FakeEngine, FakeEngine],
) -> None:
    p, d = pair
    said: list[str] = []
    report = live.run_live("python", _opts(p.url, d.url, block_size=16), said.append)
    v = report.results[0]
    assert v.config is not None and v.config.block_size == BLOCK  # /metrics wins over 16
    assert v.config.prompt_len == BLOCK + 1 and p.dead
    warning = [n for n in report.notes if n.startswith("warning: --block-size 16 disagrees")]
    assert warning and f"block_size={BLOCK}" in warning[0]
    assert any("--block-size 16 disagrees" in m for m in said)


@pytest.mark.parametrize("pair", [(True, True)], indirect=True)
def test_block_size_that_agrees_gives_no_warning(pair: tuple[FakeEngine, FakeEngine]) -> None:
    p, d = pair
    report = live.run_live("python", _opts(p.url, d.url, block_size=BLOCK), lambda _: None)
    assert not any("disagrees" in n for n in report.notes)
    assert report.results[0].config is not None
    assert report.results[0].config.block_size == BLOCK


@pytest.mark.parametrize("pair", [(True, False)], indirect=True)
def test_block_size_is_the_fallback_when_metrics_cannot_say(pair: tuple[FakeEngine, FakeEngine]) -> None:
    p, d = pair
    report = live.run_live("python", _opts(p.url, d.url, block_size=BLOCK), lambda _: None)
    v = report.results[0]
    assert v.config is not None and v.config.block_size == BLOCK and p.dead
    assert any(f"using --block-size {BLOCK} as W" in n for n in report.notes)


@pytest.mark.parametrize("pair", [(True, False)], indirect=True)
def test_no_block_size_anywhere_exits_3(pair: tuple[FakeEngine, FakeEngine]) -> None:
    p, d = pair
    with pytest.raises(CouldNotRun, match="effective block size"):
        live.run_live("python", _opts(p.url, d.url), lambda _: None)
    assert not p.dead  # nothing was sent to the prefill engine


def test_live_connectors_come_from_the_registry(tmp_path: Path) -> None:
    from vllm_pd_doctor.knowledge.facts import connectors

    assert options.parse_connector("all") == "nixl"
    with pytest.raises(BadInput, match=r"supports the NIXL \(pull\) connector only"):
        options.parse_connector("mooncake")
    connectors.register(
        connectors.Connector(
            key="fake-live",
            label="Fake (live)",
            vllm_names=("FakeLiveConnector",),
            library="fake",
            source_words=("fake",),
            truncating_hooks=(connectors.EARLY_HOOK,),
            fixed_in="0.29.0",
            live=True,
            kv_connector_extra={"kv_ip": "127.0.0.1"},
        )
    )
    try:
        assert options.parse_connector("fake-live") == "fake-live"
        with pytest.raises(BadInput, match="one connector at a time"):
            options.parse_connector("all")
        lo = live.LiveOptions(connector="fake-live")
        eng = engines.Engine(
            role="prefill", port=1, side_port=2, log=tmp_path / "p.log", trace=tmp_path / "p.jsonl"
        )
        cmd = engines.engine_command("python", eng, tmp_path, True, "cpu", lo)
        cfg = json.loads(cmd[cmd.index("--kv-transfer-config") + 1])
        assert cfg["kv_connector"] == "FakeLiveConnector" and cfg["kv_role"] == "kv_producer"
        assert cfg["kv_ip"] == "127.0.0.1"
        assert "fake-live" in live._available()
    finally:
        connectors.unregister("fake-live")


def test_helpers() -> None:
    assert evidence.block_size_from_metrics('vllm:cache_config_info{block_size="128"} 1.0') == 128
    assert options.is_loopback("http://localhost:1") and options.is_loopback("http://127.0.0.2:1")
    assert not options.is_loopback("http://example.com")
    log = (
        'Traceback (most recent call last):\n  File "/x/site-packages/vllm/v1/core/sched/'
        'scheduler.py", line 967, in schedule\n    assert num_new_tokens > 0\n'
        "AssertionError\n"
    )
    a = evidence.assertion_from_log(log)
    assert a is not None and a["location"] == "vllm/v1/core/sched/scheduler.py:967"
    assert a["matches_53514"]
    # as vLLM logs it: engine-prefixed lines, then the API server's own EngineDeadError traceback
    prefixed = "".join(
        f"(EngineCore pid=7) ERROR 12-01 00:10:04 [core.py:1348] {line}\n" for line in log.splitlines()
    )
    dead = (
        'Traceback (most recent call last):\n  File "/x/site-packages/vllm/v1/engine/'
        'core_client.py", line 1104, in get_output_async\n    raise self._format_exception('
        "outputs) from None\nvllm.v1.engine.exceptions.EngineDeadError: EngineCore "
        "encountered an issue.\n"
    )
    b = evidence.assertion_from_log("noise\n" + prefixed + "AsyncLLM output_handler failed.\n" + dead)
    assert b is not None and b["location"] == "vllm/v1/core/sched/scheduler.py:967"
    assert b["statement"] == "assert num_new_tokens > 0"
    assert b["traceback"].startswith("Traceback") and b["traceback"].endswith("AssertionError")
    c = evidence.assertion_from_log("noise\n" + dead)
    assert c is not None and not c["matches_53514"]
    assert c["location"] == "vllm/v1/engine/core_client.py:1104"
