"""Build the origin index from release sources: an installed package directory, an sdist
(`.tar.gz`, members read with tarfile, never extracted) or a wheel (zip). Stdlib only.

The index is deduplicated across releases: one origin per statement (file, function, kind,
exception or level, template, condition), with the releases that hold it and its line span in
each. `SCOPE` keeps it to the modules P/D failures come from (measured in
benchmarks/bench_origin_index.py: the whole of vLLM 0.32.0 is ~19k statements, the scope ~4.5k).
"""

from __future__ import annotations

import difflib
import gzip
import hashlib
import io
import itertools
import json
import tarfile
import zipfile
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from vllm_pd_doctor.knowledge.origins.extract import Statement, statements

FORMAT = 2
"""Version of the data file's layout (readers refuse another; format 1, without placeholder names
and function changes, is still read)."""
FORMATS = (1, 2)
MAX_HUNK = 8
"""Changed lines kept per hunk of a function's diff between two releases (the rest is counted)."""
MAX_HUNKS = 4
"""Hunks kept per diff (the rest is counted)."""

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
    # vllm-ascend's KV connectors (Mooncake P2P, its pooling stores, the multi-connector)
    "vllm_ascend": ("distributed/kv_transfer/", "distributed/parallel_state.py", "distributed/utils.py"),
    # Dynamo's vLLM worker (the ai-dynamo wheel's `dynamo/vllm/`): its handlers, startup, KV
    # connector glue and health; not its tests, multimodal/omni/realtime front ends
    "dynamo": tuple(
        f"vllm/{m}"
        for m in (
            "handlers.py",
            "worker_factory.py",
            "main.py",
            "unified_main.py",
            "args.py",
            "backend_args.py",
            "engine_monitor.py",
            "health_check.py",
            "kv_",
            "nixl_telemetry.py",
            "publisher.py",
            "instrumented_scheduler.py",
            "errors.py",
            "llm_engine.py",
            "engine_generate.py",
            "sidecar.py",
            "dp_topology.py",
            "envs.py",
        )
    ),
}
"""Per package: path prefixes (relative to the package) that the index covers."""


def in_scope(package: str, rel: str) -> bool:
    return rel.endswith(".py") and rel.startswith(SCOPE.get(package, ("",))) and "/tests/" not in f"/{rel}"


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
    found = ((rel, s) for rel, text in modules for s in statements(text, rel, bodies=True))
    return add_statements(doc, package, release, found)


def add_statements(
    doc: dict[str, Any], package: str, release: str, found: Iterable[tuple[str, Statement]]
) -> int:
    """`add_release` for statements already read (by any extractor): (file, statement) pairs. An
    origin row is `[file, function, kind, what, template, condition, spans, holes]`: holes as
    `[name, type]` pairs (the Python extractor) or bare names (the native one's `params`)."""
    pkg = doc.setdefault("packages", {}).setdefault(package, {"releases": [], "origins": []})
    drop_release(doc, package, release)
    releases: list[str] = pkg["releases"]
    releases.append(release)
    ri = len(releases) - 1
    index: dict[Key, list[Any]] = {_key(o): o for o in pkg["origins"]}
    bodies = doc.setdefault("_bodies", {}).setdefault(package, {})
    texts = doc.setdefault("_texts", {})
    n = 0
    for rel, s in found:
        key: Key = (rel, s.function, s.kind, s.what, s.template, s.condition)
        o = index.get(key)
        if o is None:
            o = index[key] = [*key, [], None]
            pkg["origins"].append(o)
        if not any(r[0] == ri for r in o[6]):
            o[6].append([ri, s.line, s.end_line])
        if s.holes:
            o[7:] = [[[h.name, h.type] for h in s.holes]]
        elif s.params:
            o[7:] = [list(s.params)]
        if s.kind == "def" and s.body is not None and s.shape is not None:
            h = hashlib.sha1(s.shape.encode()).hexdigest()[:12]
            texts[h] = s.body
            bodies.setdefault(f"{rel}::{s.function}", {})[release] = h
        n += 1
    return n


def finish(doc: dict[str, Any]) -> int:
    """Store, per function, the diff of each release where its source changed (against the last
    indexed release before it that held it), and drop the build's working data; returns the number
    of changes stored. Releases must be in version order (`sort_releases`)."""
    bodies: dict[str, dict[str, dict[str, str]]] = doc.pop("_bodies", {})
    texts: dict[str, str] = doc.pop("_texts", {})
    n = 0
    for package, funcs in bodies.items():
        pkg = doc["packages"][package]
        order = pkg["releases"]
        # the functions that log or raise: what triage locates (a frame elsewhere gets no diff)
        speaking = {f"{o[0]}::{o[1]}" for o in pkg["origins"] if o[2] != "def"}
        funcs = {k: v for k, v in funcs.items() if k in speaking}
        changes: dict[str, list[list[str]]] = pkg.setdefault("changes", {})
        for fkey, per in funcs.items():
            seq = [(r, per[r]) for r in order if r in per]
            got = changes.get(fkey, [])
            known = {c[0] for c in got}
            for (_r0, h0), (r1, h1) in itertools.pairwise(seq):
                if h0 != h1 and r1 not in known and h0 in texts and h1 in texts:
                    got.append([r1, diff(texts[h0], texts[h1])])
                    n += 1
            if got:
                changes[fkey] = sorted(got, key=lambda c: order.index(c[0]) if c[0] in order else -1)
    return n


def diff(old: str, new: str) -> str:
    """A short unified diff of one function between two releases: its hunks (context 1, no file
    header; positions relative to the `def` line), each cut at MAX_HUNK changed lines, at most
    MAX_HUNKS of them (the rest counted). Triage shows the hunk nearest the statement."""
    lines = list(difflib.unified_diff(old.splitlines(), new.splitlines(), lineterm="", n=1))[2:]
    hunks: list[list[str]] = []
    for ln in lines:
        if ln.startswith("@@"):
            hunks.append([ln])
        elif hunks:
            hunks[-1].append(ln[:160])
    out: list[str] = []
    for h in hunks[:MAX_HUNKS]:
        changed = [i for i, ln in enumerate(h) if ln[:1] in "+-"]
        if len(changed) > MAX_HUNK:
            cut = changed[MAX_HUNK]
            h = [*h[:cut], f"... ({len(changed) - MAX_HUNK} more changed lines)"]
        out.extend(h)
    if len(hunks) > MAX_HUNKS:
        out.append(f"... ({len(hunks) - MAX_HUNKS} more hunks)")
    return "\n".join(out)


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
            mine = index[key] = [*key, [], None]
            pkg["origins"].append(mine)
        mine[6].extend([ri, a, b] for _r, a, b in o[6])
        if len(o) > 7 and o[7]:
            mine[7:] = [o[7]]


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


def sort_releases(doc: dict[str, Any], only: Iterable[str] | None = None) -> None:
    """Releases in version order (the index's range arithmetic relies on it); of the packages
    `only` names, or of all."""
    from vllm_pd_doctor.knowledge.facts.releases import version_key

    packages = doc.get("packages", {})
    for name in list(packages) if only is None else only:
        pkg = packages[name]
        old = pkg["releases"]
        new = sorted(old, key=version_key)
        where = {i: new.index(v) for i, v in enumerate(old)}
        pkg["releases"] = new
        for o in pkg["origins"]:
            o[6] = sorted(([where[r], a, b] for r, a, b in o[6]), key=lambda x: int(x[0]))
        pkg["origins"].sort(key=lambda o: (o[0], o[6][0][1]))


def dumps(doc: dict[str, Any]) -> bytes:
    doc["format"] = FORMAT
    text = json.dumps(
        {k: v for k, v in doc.items() if not k.startswith("_")}, separators=(",", ":"), ensure_ascii=False
    )
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=9, mtime=0) as g:
        g.write(text.encode("utf-8"))
    return buf.getvalue()


def loads(data: bytes) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(gzip.decompress(data))
    if doc.get("format") not in FORMATS:
        raise ValueError(f"origin index format {doc.get('format')}, expected one of {FORMATS}")
    return doc


def merge(into: dict[str, Any], other: dict[str, Any]) -> None:
    """Add another data file's packages to `into` (a release both hold: `other`'s replaces it)."""
    for package, pkg in other.get("packages", {}).items():
        rels = pkg["releases"]
        for ri, release in enumerate(rels):
            one = [[*o[:6], [[0, a, b] for r, a, b in o[6] if r == ri], *o[7:8]] for o in pkg["origins"]]
            add_origins(into, package, release, {"origins": [o for o in one if o[6]]})
        mine = into["packages"][package].setdefault("changes", {})
        for fkey, got in pkg.get("changes", {}).items():
            have = {c[0] for c in mine.get(fkey, [])}
            mine.setdefault(fkey, []).extend(c for c in got if c[0] not in have)
