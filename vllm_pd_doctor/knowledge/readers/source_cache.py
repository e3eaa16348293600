"""Cache of what was read from an installed vLLM's source (it does not change between runs).

Keyed by the vllm package path, its version, a stamp of the files the reader looks at (count,
newest mtime, total size) and a digest of the reader's own code, so an upgrade, an edit of the
installed files or a new pd-doctor all read again. Stored as JSON under pd-doctor's cache
directory; any problem with the file means reading the source again, never a failure.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

from vllm_pd_doctor.infra import jsoncache
from vllm_pd_doctor.knowledge.readers.facts import ConvLayoutOverride, SourceFact, TruncationSite, VllmSource

_KEEP = 32


def _file() -> Path:
    from vllm_pd_doctor.infra import envs

    return envs.home() / "check-config" / "vllm-source.json"


def _reader_digest() -> str:
    h = hashlib.sha256()
    here = Path(__file__).parent
    for name in ("inspect_vllm.py", "inspect_config.py", "source_cache.py", "facts.py"):
        try:
            h.update((here / name).read_bytes())
        except OSError:
            h.update(name.encode())
    return h.hexdigest()[:16]


def stamp(vllm_path: Path, files: tuple[str, ...], dirs: tuple[str, ...]) -> list[int]:
    """[count, newest mtime_ns, total size] of the .py files the reader looks at."""
    n = newest = size = 0
    paths = [vllm_path / f for f in files]
    for d in dirs:
        for dirpath, dirnames, filenames in os.walk(vllm_path / d):
            dirnames[:] = [x for x in dirnames if x != "__pycache__"]
            paths.extend(Path(dirpath) / f for f in filenames if f.endswith(".py"))
    for p in paths:
        try:
            st = p.stat()
        except OSError:
            continue
        n += 1
        newest = max(newest, st.st_mtime_ns)
        size += st.st_size
    return [n, newest, size]


def _to_obj(v: VllmSource) -> dict[str, Any]:
    return asdict(v)


def _from_obj(o: dict[str, Any]) -> VllmSource:
    o = dict(o)
    o["sites"] = tuple(TruncationSite(**s) for s in o.get("sites") or ())
    for key in ("connectors", "kv_roles", "kv_transfer_fields"):
        o[key] = tuple(o.get(key) or ())
    if o.get("cpu_conv_layout_override"):
        o["cpu_conv_layout_override"] = ConvLayoutOverride(**o["cpu_conv_layout_override"])
    for key in (
        "mamba_hetero_tp",
        "p_tp_above_d_tp",
        "mamba_hetero_block",
        "mamba_prefix_rewrite",
        "conv_layout_assert",
        "cpu_selects_ds",
    ):
        if o.get(key):
            o[key] = SourceFact(**o[key])
    return VllmSource(**o)


def cached(
    python: str, vllm_path: Path, version: str | None, key_stamp: list[int], read: Callable[[], VllmSource]
) -> VllmSource:
    key = json.dumps([str(vllm_path), version, key_stamp, _reader_digest()])
    path = _file()
    cache = jsoncache.load(path)
    hit = cache.get(key)
    if isinstance(hit, dict):
        try:
            return replace(_from_obj(hit), python=python)
        except (TypeError, ValueError):
            pass
    fresh = read()
    if fresh.error is None:
        cache.pop(key, None)
        cache[key] = _to_obj(fresh)
        jsoncache.save(path, cache, keep=_KEEP)
    return fresh
