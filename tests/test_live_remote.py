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
from typing import Any

import pytest

from vllm_pd_doctor import inprocess, live

BLOCK = 32


class FakeEngine:
    def __init__(self, role: str, buggy: bool) -> None:
        self.role = role
        self.buggy = buggy
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
        return (f'vllm:cache_config_info{{block_size="{BLOCK}",engine="0"}} 1.0\n'
                f"vllm:nixl_bytes_transferred_sum {4096.0 * self.transfers}\n"
                f"vllm:nixl_bytes_transferred_count {float(self.transfers)}\n"
                "vllm:nixl_num_failed_transfers_total 0.0\n")

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
            return 200, {"choices": [{"token_ids": [7]}],
                         "kv_transfer_params": {"do_remote_prefill": True,
                                                "remote_block_ids": [[1]]}}
        if kv.get("do_remote_prefill"):
            self.transfers += 1
        return 200, {"choices": [{"token_ids": [5, 6, 7, 8]}]}


@pytest.fixture
def pair(request: pytest.FixtureRequest) -> Iterator[tuple[FakeEngine, FakeEngine]]:
    p, d = FakeEngine("prefill", request.param), FakeEngine("decode", False)
    for e in (p, d):
        e.thread.start()
    yield p, d
    for e in (p, d):
        e.server.shutdown()
        e.server.server_close()


def _opts() -> inprocess.ReproOptions:
    return inprocess.make_options(connector="nixl", block_size=1, prompt_len=None,
                                  mamba_cache_mode=None, kv_role="kv_producer", model=None,
                                  timeout=60)


@pytest.mark.parametrize("pair", [True], indirect=True)
def test_remote_buggy_prefill_dies(pair: tuple[FakeEngine, FakeEngine]) -> None:
    p, d = pair
    report = live.run_live("python", _opts(), lambda _: None,
                           live.LiveOptions(prefill_url=p.url, decode_url=d.url))
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
    report = live.run_live("python", _opts(), lambda _: None,
                           live.LiveOptions(prefill_url=p.url, decode_url=d.url))
    v = report.results[0]
    assert not p.dead
    assert v.assertion is not None and v.assertion.fired is False
    assert v.truncation is not None and v.truncation.hook == "unknown"
    assert any("survived" in n for n in report.notes)


def test_non_loopback_needs_confirmation() -> None:
    with pytest.raises(live.BadInput, match="kill the prefill engine"):
        live.run_live("python", _opts(), lambda _: None,
                      live.LiveOptions(prefill_url="http://10.9.8.7:8000"))


def test_helpers() -> None:
    assert live.block_size_from_metrics('vllm:cache_config_info{block_size="128"} 1.0') == 128
    assert live.is_loopback("http://localhost:1") and live.is_loopback("http://127.0.0.2:1")
    assert not live.is_loopback("http://example.com")
    log = ('Traceback (most recent call last):\n  File "/x/site-packages/vllm/v1/core/sched/'
           'scheduler.py", line 967, in schedule\n    assert num_new_tokens > 0\n'
           "AssertionError\n")
    a = live.assertion_from_log(log)
    assert a is not None and a["location"] == "vllm/v1/core/sched/scheduler.py:967"
    assert a["matches_53514"]
    # as vLLM logs it: engine-prefixed lines, then the API server's own EngineDeadError traceback
    prefixed = "".join(f"(EngineCore pid=7) ERROR 12-01 00:10:04 [core.py:1348] {line}\n"
                       for line in log.splitlines())
    dead = ('Traceback (most recent call last):\n  File "/x/site-packages/vllm/v1/engine/'
            'core_client.py", line 1104, in get_output_async\n    raise self._format_exception('
            'outputs) from None\nvllm.v1.engine.exceptions.EngineDeadError: EngineCore '
            "encountered an issue.\n")
    b = live.assertion_from_log("noise\n" + prefixed + "AsyncLLM output_handler failed.\n" + dead)
    assert b is not None and b["location"] == "vllm/v1/core/sched/scheduler.py:967"
    assert b["statement"] == "assert num_new_tokens > 0"
    assert b["traceback"].startswith("Traceback") and b["traceback"].endswith("AssertionError")
    c = live.assertion_from_log("noise\n" + dead)
    assert c is not None and not c["matches_53514"]
    assert c["location"] == "vllm/v1/engine/core_client.py:1104"
