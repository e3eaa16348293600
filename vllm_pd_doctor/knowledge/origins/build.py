"""Build the origin index from release sources: an installed package directory, an sdist
(`.tar.gz`, members read with tarfile, never extracted) or a wheel (zip). Stdlib only.

The index is deduplicated across releases: one origin per statement (file, function, kind,
exception or level, template, condition), with the releases that hold it and its line span in
each. `SCOPE` keeps it to the modules P/D failures come from (measured in
benchmarks/bench_origin_index.py: the whole of vLLM 0.32.0 is ~19k statements, the scope ~4.5k).
"""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from vllm_pd_doctor.knowledge.origins.extract import statements

FORMAT = 1
"""Version of the data file's layout (readers refuse another)."""

SCOPE: dict[str, tuple[str, ...]] = {
    "vllm": (
        "v1/core/",
        "v1/engine/",
        "v1/worker/",
        "v1/executor/",
        "v1/metrics/",
        "v1/request.py",
        "v1/outputs.py",
        "v1/kv_cache_interface.py",
        "v1/utils.py",
        "v1/serial_utils.py",
        "v1/attention/backends/mamba",
        "distributed/kv_transfer/",
        "distributed/parallel_state.py",
        "distributed/utils.py",
        "distributed/kv_events.py",
        "config/",
        "config.py",
        "entrypoints/openai/",
        "entrypoints/serve",
        "entrypoints/launcher.py",
        "entrypoints/utils.py",
        "entrypoints/api_server.py",
        "engine/",
        "platforms/",
        "model_executor/layers/mamba/",
        "envs.py",
        "executor/",
        "utils/network_utils.py",
        "utils/system_utils.py",
        "utils/__init__.py",
    ),
    "nixl": ("",),
    "lmcache": (
        "integration/vllm/",
        "v1/storage_backend/",
        "v1/gpu_connector/",
        "v1/transfer_channel/",
        "v1/cache_engine.py",
        "v1/config.py",
    ),
}
"""Per package: path prefixes (relative to the package) that the index covers."""


def in_scope(package: str, rel: str) -> bool:
    return rel.endswith(".py") and rel.startswith(SCOPE.get(package, ("",)))


def from_dir(root: Path, package: str) -> Iterator[tuple[str, str]]:
    """(path relative to the package, text) of every in-scope module of an installed package."""
    for p in sorted(root.rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if "__pycache__" not in rel and in_scope(package, rel):
            yield rel, p.read_text(encoding="utf-8", errors="replace")


def from_archive(path: Path, package: str) -> Iterator[tuple[str, str]]:
    """The same from an sdist (`<name>-<ver>/<package>/...`) or a wheel (`<package>/...`)."""
    if path.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(path) as z:
            for name in sorted(z.namelist()):
                rel = _rel(name, package)
                if rel is not None and in_scope(package, rel):
                    yield rel, z.read(name).decode("utf-8", errors="replace")
        return
    with tarfile.open(path, "r:*") as t:
        for member in t:
            rel = _rel(member.name, package)
            if rel is None or not member.isfile() or not in_scope(package, rel):
                continue
            f = t.extractfile(member)
            if f is not None:
                yield rel, f.read().decode("utf-8", errors="replace")


def _rel(name: str, package: str) -> str | None:
    parts = name.split("/")
    for i in range(min(3, len(parts) - 1)):
        if parts[i] == package or parts[i].startswith(package + "_cu"):  # nixl_cu12/: the nixl wheel
            return "/".join(parts[i + 1 :])
    return None


Key = tuple[str, str, str, str, str | None, str | None]


def add_release(doc: dict[str, Any], package: str, release: str, modules: Iterable[tuple[str, str]]) -> int:
    """Merge one release's statements into `doc` (the data file's JSON object); returns their count.
    A release already in the document is replaced."""
    pkg = doc.setdefault("packages", {}).setdefault(package, {"releases": [], "origins": []})
    drop_release(doc, package, release)
    releases: list[str] = pkg["releases"]
    releases.append(release)
    ri = len(releases) - 1
    index: dict[Key, list[Any]] = {_key(o): o for o in pkg["origins"]}
    n = 0
    for rel, text in modules:
        for s in statements(text, rel):
            key: Key = (rel, s.function, s.kind, s.what, s.template, s.condition)
            o = index.get(key)
            if o is None:
                o = index[key] = [*key, []]
                pkg["origins"].append(o)
            if not any(r[0] == ri for r in o[6]):
                o[6].append([ri, s.line, s.end_line])
            n += 1
    return n


def add_origins(doc: dict[str, Any], package: str, release: str, one: dict[str, Any]) -> None:
    """Merge a one-release package section (`one`, as `add_release` wrote it) into `doc`."""
    pkg = doc.setdefault("packages", {}).setdefault(package, {"releases": [], "origins": []})
    drop_release(doc, package, release)
    pkg["releases"].append(release)
    ri = len(pkg["releases"]) - 1
    index: dict[Key, list[Any]] = {_key(o): o for o in pkg["origins"]}
    for o in one["origins"]:
        key = _key(o)
        mine = index.get(key)
        if mine is None:
            mine = index[key] = [*key, []]
            pkg["origins"].append(mine)
        mine[6].extend([ri, a, b] for _r, a, b in o[6])


def _key(o: list[Any]) -> Key:
    return (o[0], o[1], o[2], o[3], o[4], o[5])


def drop_release(doc: dict[str, Any], package: str, release: str) -> None:
    pkg = doc.get("packages", {}).get(package)
    if not pkg or release not in pkg["releases"]:
        return
    ri = pkg["releases"].index(release)
    pkg["releases"].pop(ri)
    kept = []
    for o in pkg["origins"]:
        o[6] = [[r - (r > ri), a, b] for r, a, b in o[6] if r != ri]
        if o[6]:
            kept.append(o)
    pkg["origins"] = kept


def sort_releases(doc: dict[str, Any]) -> None:
    """Releases in version order (the index's range arithmetic relies on it)."""
    from vllm_pd_doctor.knowledge.facts.releases import version_key

    for pkg in doc.get("packages", {}).values():
        old = pkg["releases"]
        new = sorted(old, key=version_key)
        where = {i: new.index(v) for i, v in enumerate(old)}
        pkg["releases"] = new
        for o in pkg["origins"]:
            o[6] = sorted(([where[r], a, b] for r, a, b in o[6]), key=lambda x: int(x[0]))
        pkg["origins"].sort(key=lambda o: (o[0], o[6][0][1]))


def dumps(doc: dict[str, Any]) -> bytes:
    doc["format"] = FORMAT
    text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0) as g:
        g.write(text.encode("utf-8"))
    return buf.getvalue()


def loads(data: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(gzip.decompress(data))
    if doc.get("format") != FORMAT:
        raise ValueError(f"origin index format {doc.get('format')}, expected {FORMAT}")
    return doc
