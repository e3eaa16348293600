"""The origin index: every statement that writes a log line or raises an error in the P/D modules
of vLLM 0.20 - 0.33 (and NIXL's and LMCache's Python), with the releases that hold it.

Data: `index.json.gz` beside this file, built by `scripts/build_origin_index.py` from the release
sources (ast only; a new release = rerun the script). `load()` reads it once; `with_installed()`
adds an installed vLLM release on the fly (read from its source, cached under pd-doctor's cache
directory), for `triage --python`. Works where no vLLM is installed.
"""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path
from typing import Any

from vllm_pd_doctor.knowledge.origins import build
from vllm_pd_doctor.knowledge.origins.index import Lifetime, Origin, OriginIndex, base

__all__ = ["DATA", "Lifetime", "Origin", "OriginIndex", "base", "load", "with_installed"]

DATA = Path(__file__).with_name("index.json.gz")


@functools.cache
def _packaged_doc_bytes() -> bytes:
    try:
        return DATA.read_bytes()
    except OSError:
        return b""


@functools.cache
def load() -> OriginIndex:
    """The packaged index (an empty one if the data file is missing)."""
    data = _packaged_doc_bytes()
    return OriginIndex(build.loads(data) if data else {})


def _stamp(root: Path) -> str:
    h = hashlib.sha256()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for f in sorted(filenames):
            if f.endswith(".py"):
                rel = os.path.relpath(os.path.join(dirpath, f), root)
                if build.in_scope("vllm", rel.replace(os.sep, "/")):
                    st = os.stat(os.path.join(dirpath, f))
                    h.update(f"{rel}:{st.st_size}:{st.st_mtime_ns};".encode())
    h.update(Path(build.__file__).with_name("extract.py").read_bytes())
    return h.hexdigest()[:16]


@functools.cache
def with_installed(vllm_path: str, version: str) -> OriginIndex:
    """The packaged index plus the release installed at `vllm_path` (its statements read from the
    source, so its line numbers are exact). Cached per (version, files) under pd-doctor's cache."""
    from vllm_pd_doctor.infra import envs

    root = Path(vllm_path)
    release = base(version)
    try:
        cache = envs.home() / "origins" / f"vllm-{release}-{_stamp(root)}.json.gz"
    except OSError:
        return load()
    doc: dict[str, Any] = {}
    try:
        doc = build.loads(cache.read_bytes())
    except (OSError, ValueError):
        build.add_release(doc, "vllm", release, build.from_dir(root, "vllm"))
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_suffix(".tmp")
            tmp.write_bytes(build.dumps(doc))
            tmp.replace(cache)
        except OSError:
            pass  # a cache that cannot be written only means reading the source again
    merged = build.loads(_packaged_doc_bytes()) if _packaged_doc_bytes() else {}
    build.drop_release(merged, "vllm", release)
    pkg = doc.get("packages", {}).get("vllm")
    if pkg:
        build.add_origins(merged, "vllm", release, pkg)
    build.sort_releases(merged)
    return OriginIndex(merged)
