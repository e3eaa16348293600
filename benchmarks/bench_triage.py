"""Throughput and peak memory of `pd-doctor triage` on a generated multi-GB-class log.

Writes a log of SIZE (default 1 GiB) of realistic vLLM P/D lines (engine and worker prefixes,
metrics, KV-transfer debug lines, a few warnings), with a NIXL handshake failure in the middle
and the #53514 assertion at the end; then triages it in a fresh child process and prints MB/s
and the child's peak RSS. Goal (issue 16): >= 50 MB/s, <= 200 MB. `--prefix` writes every line
behind a stern/kubectl `--prefix` pod and container (issue 24: the reader finds the record
wherever it starts and learns the prefix), to measure what a collector's prefix costs.

    python benchmarks/bench_triage.py [--size-mb 1024] [--prefix] [--keep PATH]
    python benchmarks/bench_triage.py --one-line     # a pasted line: fresh process, then warm

`--one-line` (issue 32): the time `pd-doctor triage` takes for a one-line log (a bare warning as a
thread quotes it) in a fresh process (loading the origin index included), and per line once warm.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

LINES = (
    "(APIServer pid=4107) INFO 08-25 10:{m:02d}:{s:02d} [loggers.py:259] Engine 000: Avg prompt throughput: "
    "1873.4 tokens/s, Avg generation throughput: 311.9 tokens/s, Running: 31 reqs, Waiting: 2 reqs, "
    "GPU KV cache usage: 41.2%, Prefix cache hit rate: 63.0%\n",
    '(APIServer pid=4107) INFO:     10.0.3.17:{s}412 - "POST /v1/completions HTTP/1.1" 200 OK\n',
    "(EngineCore_DP0 pid=4211) DEBUG 08-25 10:{m:02d}:{s:02d} [nixl/base_worker.py:1905] start_load_kv for "
    "request cmpl-{m}{s}-0 from remote engine 5b1c. Num local_block_ids: 14. Num remote_block_ids: 14.\n",
    "(Worker_TP1 pid=4290) INFO 08-25 10:{m:02d}:{s:02d} [metrics.py:103] KV Transfer metrics: "
    "Num successful "
    "transfers=18, Avg xfer time (ms)=9.8, P90 xfer time (ms)=12.1, Avg MB per transfer=70.0\n",
    "(APIServer pid=4107) INFO 08-25 10:{m:02d}:{s:02d} [logger.py:43] Received request cmpl-{m}{s}-0: "
    "params: SamplingParams(n=1, temperature=0.7, top_p=0.95, max_tokens=1), "
    "prompt_token_ids: [128000, 791]\n",
    "(EngineCore_DP0 pid=4211) WARNING 08-25 10:{m:02d}:{s:02d} [scheduler.py:1402] Preempting request "
    "cmpl-{m}{s}-3 to free KV cache blocks\n",
)
MIDDLE = (
    "(Worker_TP0 pid=4289) ERROR 08-25 10:30:00 [base_worker.py:1263] "
    "NIXL transfer failure: handshake_failed | "
    "Context: {'failure_type': 'handshake_failed', 'request_id': 'cmpl-9-0'}\n"
)
END = (
    "(EngineCore_DP0 pid=4211) ERROR 08-25 10:59:59 [core.py:1098] EngineCore encountered a fatal error.\n"
    "(EngineCore_DP0 pid=4211) ERROR 08-25 10:59:59 [core.py:1098] Traceback (most recent call last):\n"
    '(EngineCore_DP0 pid=4211) ERROR 08-25 10:59:59 [core.py:1098]   File "/vllm/v1/core/sched/scheduler.py",'
    " line 700, in schedule\n"
    "(EngineCore_DP0 pid=4211) ERROR 08-25 10:59:59 [core.py:1098]     assert num_new_tokens > 0\n"
    "(EngineCore_DP0 pid=4211) ERROR 08-25 10:59:59 [core.py:1098] AssertionError\n"
)


STERN = "ms-pd-llm-d-modelservice-decode-6c8f9c4df6-vh88z vllm "
"""A stern prefix (pod, container) as llm-d/llm-d#394 shows it."""


def _prefixed(text: str, prefix: str) -> str:
    return "".join(prefix + ln for ln in text.splitlines(keepends=True)) if prefix else text


def generate(path: Path, size: int, prefix: str = "") -> int:
    lines = "".join(LINES[i % len(LINES)].format(m=(i // 60) % 60, s=i % 60) for i in range(20000))
    block = _prefixed(lines, prefix).encode()
    written = 0
    with path.open("wb") as f:
        while written < size // 2:
            f.write(block)
            written += len(block)
        f.write(_prefixed(MIDDLE, prefix).encode())
        while written < size:
            f.write(block)
            written += len(block)
        f.write(_prefixed(END, prefix).encode())
    return path.stat().st_size


CHILD = """
import json, resource, sys, time
t0, c0 = time.perf_counter(), time.process_time()
from vllm_pd_doctor import triage
r = triage.triage([triage.LogInput(sys.argv[1])])
dt, cpu = time.perf_counter() - t0, time.process_time() - c0
i = r.inputs[0]
print(json.dumps({"seconds": dt, "cpu": cpu, "rss_kb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss,
                  "verdicts": [v.cls for v in r.verdicts], "lines": i.lines,
                  "first_exception": i.first_exception and i.first_exception.text,
                  "last_error": i.last_error and i.last_error.text}))
"""


ONE_LINE = (
    "Releasing expired KV blocks for request cmpl-3da205a6-1c3c-41b5-aeaa-b8421e81fd5c-0 which were "
    "retrieved by 0 decode worker(s) within 120 seconds."
)
"""vllm-project/vllm#25562's line without the logger's prefix."""
ONE_CHILD = """
import sys, time
t0 = time.perf_counter()
from vllm_pd_doctor import triage
r = triage.triage_text(sys.argv[1] + "\\n")
cold = time.perf_counter() - t0
assert r.unknown is not None and r.unknown.origin is not None, "not located"
n = 200
t0 = time.perf_counter()
for i in range(n):
    triage.triage_text(sys.argv[1].replace("cmpl-3da2", f"cmpl-{i}") + "\\n")
print(cold, (time.perf_counter() - t0) / n, r.unknown.origin.function)
"""


def one_line() -> int:
    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(
        [sys.executable, "-c", ONE_CHILD, ONE_LINE],
        capture_output=True,
        text=True,
        cwd=root,
        env={**os.environ, "PYTHONPATH": str(root)},
        check=True,
    )
    cold, warm, where = proc.stdout.split()
    print(f"one-line log: {float(cold):.2f} s in a fresh process (origin index loaded), ")
    print(f"  {float(warm) * 1e3:.1f} ms per line once warm; located at {where}")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--one-line", action="store_true", help="time a one-line log (cold and warm)")
    ap.add_argument("--size-mb", type=int, default=1024)
    ap.add_argument("--keep", type=Path, default=None, help="write the log here and keep it")
    ap.add_argument("--prefix", action="store_true", help="every line behind a stern pod/container prefix")
    args = ap.parse_args()
    if args.one_line:
        return one_line()
    with tempfile.TemporaryDirectory(prefix="pd-doctor-bench-") as tmp:
        path = args.keep or Path(tmp) / "big.log"
        t0 = time.perf_counter()
        size = generate(path, args.size_mb << 20, STERN if args.prefix else "")
        print(f"generated {size / 1e6:.0f} MB in {time.perf_counter() - t0:.1f} s: {path}", file=sys.stderr)
        root = Path(__file__).resolve().parent.parent
        proc = subprocess.run(
            [sys.executable, "-c", CHILD, str(path)],
            capture_output=True,
            text=True,
            cwd=root,
            env={**os.environ, "PYTHONPATH": str(root)},
            check=True,
        )
        res = json.loads(proc.stdout)
    mbs = size / 1e6 / res["seconds"]
    cpu_mbs = size / 1e6 / res["cpu"]
    rss = res["rss_kb"] / 1024
    kind = "stern-prefixed" if args.prefix else "plain"
    print(
        f"triage ({kind}): {size / 1e6:.0f} MB, {res['lines']} lines in {res['seconds']:.1f} s "
        f"= {mbs:.0f} MB/s"
    )
    print(f"  CPU time {res['cpu']:.1f} s = {cpu_mbs:.0f} MB/s of CPU (the machine may be shared)")
    print(f"peak RSS: {rss:.0f} MB")
    print(f"verdicts: {', '.join(res['verdicts'])}")
    print(f"located: first exception {res['first_exception']!r}, last ERROR {res['last_error']!r}")
    ok = max(mbs, cpu_mbs) >= 50 and rss <= 200
    load = os.getloadavg()[0]
    print(
        f"goal >= 50 MB/s and <= 200 MB: {'met' if ok else 'NOT met'} "
        f"(MB/s judged on CPU time when the machine is shared; load average {load:.1f} "
        f"on {os.cpu_count()} CPUs)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
