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
from vllm_pd_doctor.knowledge.origins.index import Change, Lifetime, Origin, OriginIndex, base

__all__ = [
    "DATA",
    "OTHERS",
    "REPOSITORY",
    "Change",
    "Lifetime",
    "Origin",
    "OriginIndex",
    "base",
    "load",
    "packaged_doc",
    "with_installed",
]

DATA = Path(__file__).with_name("index.json.gz")
"""vLLM's data file; every other `*.json.gz` beside it (third-party sources) is merged in."""
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


def _data_files(folder: Path) -> tuple[tuple[str, bytes], ...]:
    """(name, bytes) of every data file in `folder`: vLLM's `index.json.gz` first, then the others
    by name; a file that cannot be read is skipped."""
    out = []
    for p in sorted(folder.glob("*.json.gz"), key=lambda p: (p.name != DATA.name, p.name)):
        try:
            out.append((p.name, p.read_bytes()))
        except OSError:
            continue
    return tuple(out)


@functools.cache
def _packaged_files() -> tuple[tuple[str, bytes], ...]:
    return _data_files(DATA.parent)


def packaged_doc(folder: Path | None = None) -> dict[str, Any]:
    """The document of every data file in `folder` (default: the packaged ones), merged: vLLM's
    `index.json.gz` first, then each other file's packages (a release two files hold: the later
    file's, by name). A file that cannot be read is skipped."""
    files = _packaged_files() if folder is None else _data_files(folder)
    doc: dict[str, Any] = {}
    for _name, data in files:
        try:
            one = build.loads(data)
        except (OSError, ValueError, EOFError):
            continue
        if not doc:
            doc = one
        else:
            build.merge(doc, one)
    if len(files) > 1:
        build.sort_releases(doc)
    return doc


@functools.cache
def load() -> OriginIndex:
    """The packaged index: every data file of the origins folder (an empty one if none)."""
    return OriginIndex(packaged_doc())


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
    merged = packaged_doc()
    build.drop_release(merged, "vllm", release)
    pkg = doc.get("packages", {}).get("vllm")
    if pkg:
        build.add_origins(merged, "vllm", release, pkg)
    build.sort_releases(merged)
    return OriginIndex(merged)
