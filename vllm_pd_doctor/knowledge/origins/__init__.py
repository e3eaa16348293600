"""The origin index: every statement that writes a log line or raises an error in the P/D modules
of vLLM 0.20 - 0.33 (and NIXL's and LMCache's Python), with the releases that hold it; and of the
software around them (NIXL's C++ core and plugins, UCX, Mooncake, LMCache, vllm-ascend's
connectors, Dynamo's vLLM worker, llm-d's routing sidecar).

Data: every `*.json.gz` beside this file, merged: `index.json.gz` (vLLM, built by
`scripts/build_origin_index.py`) and `others.json.gz` (the rest, `scripts/build_origin_others.py`),
read from the release sources (ast for Python, a tokenizer for C/C++/Go; a new release = rerun
the script). `load()` reads them once; `with_installed()`
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

__all__ = [
    "DATA",
    "OTHERS",
    "REPOSITORY",
    "Lifetime",
    "Origin",
    "OriginIndex",
    "base",
    "load",
    "with_installed",
]

DATA = Path(__file__).with_name("index.json.gz")
OTHERS = DATA.with_name("others.json.gz")
REPOSITORY = {
    "vllm": "vllm-project/vllm",
    "nixl": "ai-dynamo/nixl",
    "libnixl": "ai-dynamo/nixl",
    "ucx": "openucx/ucx",
    "mooncake": "kvcache-ai/Mooncake",
    "lmcache": "LMCache/LMCache",
    "vllm_ascend": "vllm-project/vllm-ascend",
    "dynamo": "ai-dynamo/dynamo",
    "llm-d-routing-sidecar": "llm-d/llm-d-routing-sidecar",
    "llm-d-inference-scheduler": "llm-d/llm-d-inference-scheduler",
}
"""Each indexed package's public repository (where an upstream search of its origin goes)."""


@functools.cache
def _packaged_docs() -> tuple[bytes, ...]:
    """Every data file's bytes: `index.json.gz` first, then the others by name."""
    files = sorted(DATA.parent.glob("*.json.gz"), key=lambda p: (p != DATA, p.name))
    out = []
    for p in files:
        try:
            out.append(p.read_bytes())
        except OSError:
            continue
    return tuple(out)


def _packaged() -> dict[str, Any]:
    """The data files merged into one (fresh) document; a file of another format is skipped."""
    doc: dict[str, Any] = {}
    for data in _packaged_docs():
        try:
            one = build.loads(data)
        except (OSError, ValueError):
            continue
        if doc:
            build.merge(doc, one)
        else:
            doc = one
    return doc


@functools.cache
def load() -> OriginIndex:
    """The packaged index (an empty one if the data files are missing)."""
    return OriginIndex(_packaged())


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
    from vllm_pd_doctor import envs

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
    merged = _packaged()
    build.drop_release(merged, "vllm", release)
    pkg = doc.get("packages", {}).get("vllm")
    if pkg:
        build.add_origins(merged, "vllm", release, pkg)
    build.sort_releases(merged)
    return OriginIndex(merged)
