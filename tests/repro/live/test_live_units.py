"""The live package's parts that need no engine: the options adapter, the traceback reader both
live and report use, the one `Truncation` both engines build, and the module boundaries."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from vllm_pd_doctor.infra import tracebacks
from vllm_pd_doctor.infra.errors import BadInput
from vllm_pd_doctor.invllm import observe
from vllm_pd_doctor.report import logs
from vllm_pd_doctor.repro.live import evidence, from_repro_options, options
from vllm_pd_doctor.results.repro import Frame, Truncation

ROOT = Path(__file__).resolve().parents[3]


def _adapt(**over: Any) -> options.LiveOptions:
    kw: dict[str, Any] = {
        "connector": "nixl",
        "block_size": None,
        "prompt_len": None,
        "mamba_cache_mode": None,
        "kv_role": "kv_producer",
        "model": None,
        "prefill_url": None,
        "decode_url": None,
        "confirm_remote": False,
        "run_dir": None,
        "prefill_port": None,
        "decode_port": None,
        "device": None,
        "timeout": 600.0,
    }
    kw.update(over)
    return from_repro_options(**kw)


def test_adapter_defaults() -> None:
    lo = _adapt()
    assert lo == options.LiveOptions()
    assert lo.entry.key == "nixl" and not lo.remote and lo.effective_mamba_cache_mode == "align"
    assert _adapt(connector="all").connector == "nixl"
    assert _adapt(prefill_url="http://127.0.0.1:1", block_size=16).remote


@pytest.mark.parametrize(
    ("over", "needle"),
    [
        ({"connector": "mooncake"}, "supports the NIXL (pull) connector only"),
        ({"connector": "lmcache"}, "unknown connector"),
        ({"decode_url": "http://127.0.0.1:2"}, "--decode-url needs --prefill-url"),
        ({"prefill_url": "http://127.0.0.1:1", "prefill_port": 8000}, "do not apply"),
        ({"block_size": 0}, "--block-size 0"),
        ({"prompt_len": 1}, "--prompt-len 1"),
        ({"prompt_len": options.MAX_MODEL_LEN}, "max model length"),
        ({"prefill_port": 70000}, "not a TCP port"),
        ({"device": "tpu"}, "--device tpu"),
        ({"kv_role": "kv_sideways"}, "--kv-role"),
        ({"mamba_cache_mode": "most"}, "--mamba-cache-mode"),
        ({"model": Path("/nonexistent")}, "no config.json"),
    ],
)
def test_adapter_rejects(over: dict[str, Any], needle: str) -> None:
    with pytest.raises(BadInput) as err:
        _adapt(**over)
    assert needle in str(err.value)


def test_remote_prompt_len_is_not_bound_by_the_local_engines() -> None:
    lo = _adapt(prefill_url="http://127.0.0.1:1", prompt_len=2 * options.MAX_MODEL_LEN)
    assert lo.prompt_len == 2 * options.MAX_MODEL_LEN


LOG = (
    "(EngineCore_DP0 pid=7) ERROR 12-01 00:10:04 [core.py:1348] Traceback (most recent call last):\n"
    '(EngineCore_DP0 pid=7) ERROR 12-01 00:10:04 [core.py:1348]   File "/x/vllm/a.py", line 3, in f\n'
    "(EngineCore_DP0 pid=7) ERROR 12-01 00:10:04 [core.py:1348]     g()\n"
    "(EngineCore_DP0 pid=7) ERROR 12-01 00:10:04 [core.py:1348] KeyError: 1\n"
    "\n"
    "During handling of the above exception, another exception occurred:\n"
    "\n"
    "Traceback (most recent call last):\n"
    '  File "/x/vllm/b.py", line 9, in h\n'
    "    assert num_new_tokens > 0\n"
    "AssertionError\n"
    "INFO 12-01 00:10:05 [api_server.py:1] shutting down\n"
)


def test_tracebacks_chained_and_prefixed() -> None:
    tbs = tracebacks.tracebacks(LOG)
    assert len(tbs) == 1  # one chained traceback, prefixes stripped
    assert tbs[0][0] == "Traceback (most recent call last):"
    assert tbs[0][-1] == "AssertionError"
    assert "KeyError: 1" in tbs[0]
    # the report's excerpts read the same traceback from the same reader
    found = logs.find(LOG)
    assert found.excerpts[0].kind == "traceback"
    assert "nixl-p-side-truncation-53514" in found.found  # triage's class (one catalogue)
    a = evidence.assertion_from_log(LOG)
    assert a is not None and a["location"] == "vllm/b.py:9" and a["matches_53514"]


def test_truncation_from_observed_summary() -> None:
    rec = observe.Recorder()
    rec.events += [
        {
            "seq": 0,
            "kind": "lookup",
            "request_id": "r",
            "method": "get_computed_blocks",
            "num_tokens": 33,
            "hit_tokens": 32,
        },
        {
            "seq": 1,
            "kind": "truncate",
            "request_id": "r",
            "hook": "get_num_new_matched_tokens",
            "len_before": 33,
            "len_after": 32,
            "op": "pop()",
            "stack": [
                {"file": "vllm/x.py", "line": 5, "function": "hook", "code": "self._t(r)"},
                {"file": "vllm/y.py", "line": 9, "function": "_t", "code": "r.pop()"},
            ],
        },
    ]
    t = Truncation.from_observed(observe.summarize(rec, "r"))
    assert t.hook == "get_num_new_matched_tokens" and t.before_lookup is False
    assert t.tokens_removed == 1 and t.operation == "pop()"
    assert t.statement == Frame("vllm/y.py", 9, "_t", "r.pop()")
    assert t.call_site == Frame("vllm/x.py", 5, "hook", "self._t(r)")
    assert len(t.stack) == 2
    assert Truncation.from_observed(None) == Truncation(hook="none", before_lookup=None)
    assert Truncation.from_observed({}, missing="unknown").hook == "unknown"
    none = Truncation.from_observed(observe.summarize(observe.Recorder(), "r"))
    assert none == Truncation(hook="none", before_lookup=None)


def test_repro_and_live_do_not_import_report() -> None:
    code = (
        "import sys, vllm_pd_doctor.repro.live, vllm_pd_doctor.repro.inprocess, "
        "vllm_pd_doctor.commands.repro\n"
        "bad = sorted(m for m in sys.modules if m.startswith('vllm_pd_doctor.report'))\n"
        "assert not bad, bad\n"
        "assert 'vllm' not in sys.modules and 'torch' not in sys.modules\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_a_taken_side_channel_port_is_seen_at_once(tmp_path: Path) -> None:
    """vLLM's NIXL listener fails to bind in a thread and the engine hangs (vllm#20965): the wait
    must stop on the log line, not after the start-up timeout, so run_local can retry."""
    import subprocess
    import sys
    import time

    from vllm_pd_doctor.repro.live import engines
    from vllm_pd_doctor.repro.live.client import Client

    log = tmp_path / "decode.log"
    log.write_text("zmq.error.ZMQError: Address already in use (addr='tcp://127.0.0.1:46391')\n")
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    eng = engines.Engine(
        role="decode",
        port=engines.free_port(),
        side_port=engines.free_port(),
        log=log,
        trace=tmp_path / "t.jsonl",
        proc=proc,
    )
    client = Client()
    t0 = time.monotonic()
    try:
        with pytest.raises(engines.PortTaken):
            engines.wait_healthy(client, [eng], timeout=60, progress=lambda _m: None)
    finally:
        proc.kill()
        proc.wait()
        client.close()
    assert time.monotonic() - t0 < 10
