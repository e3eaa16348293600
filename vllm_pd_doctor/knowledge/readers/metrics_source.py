"""Which Prometheus metrics a vLLM release exposes, read from its source with `ast` (never imported).

A metric is a call with a keyword `name="vllm:..."` (vLLM's `_counter_cls(...)`, `_gauge_cls(...)`,
`_histogram_cls(...)`, prometheus_client's `Counter(...)` and the like) anywhere in the package;
its type comes from the callee's name, its extra labels from the string literals of its
`labelnames` argument (the shared `model_name`/`engine` labels are a variable there). The NIXL
side channel's wire facts come from the connector's `metadata.py`: `NIXL_CONNECTOR_VERSION`, the
fields of `NixlAgentMetadata` and the factors of the compatibility hash.

Used by `scripts/build_metric_index.py` (the versioned index in `metrics_index.json`) and by
`status --python` (the installed release, read on the fly).
"""

from __future__ import annotations

import ast
from pathlib import Path
from typing import Any

SKIP_DIRS = {"tests", "benchmarks", "__pycache__"}
KINDS = (("histogram", "histogram"), ("counter", "counter"), ("gauge", "gauge"), ("summary", "summary"))
NIXL_DIRS = (
    "distributed/kv_transfer/kv_connector/v1/nixl",
    "distributed/kv_transfer/kv_connector/v1",
)


def _kind(func: ast.expr) -> str:
    name = func.attr if isinstance(func, ast.Attribute) else func.id if isinstance(func, ast.Name) else ""
    low = name.lower()
    for key, kind in KINDS:
        if key in low:
            return kind
    return "unknown"


def _strings(node: ast.AST | None) -> list[str]:
    if node is None:
        return []
    return [
        n.value
        for n in ast.walk(node)
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value.isidentifier()
    ]


def metrics_in(path: Path, rel: str) -> list[dict[str, Any]]:
    """The `name="vllm:..."` metric definitions of one file."""
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    if '"vllm:' not in text and "'vllm:" not in text:
        return []
    try:
        tree = ast.parse(text)
    except SyntaxError:
        return []
    # `name = "vllm:cache_config_info"` then `_gauge_cls(name=name, ...)`: the variable's values
    assigned: dict[str, list[str]] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            v = node.value.value
            if isinstance(v, str) and v.startswith("vllm:"):
                for t in node.targets:
                    if isinstance(t, ast.Name):
                        assigned.setdefault(t.id, []).append(v)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        kw = {k.arg: k.value for k in node.keywords if k.arg}
        name = kw.get("name")
        if isinstance(name, ast.Constant) and isinstance(name.value, str):
            values = [name.value]
        elif isinstance(name, ast.Name):
            values = assigned.get(name.id, [])
        else:
            continue
        for value in values:
            if value.startswith("vllm:"):
                out.append(
                    {
                        "name": value,
                        "type": _kind(node.func),
                        "labels": sorted(set(_strings(kw.get("labelnames")))),
                        "file": rel,
                        "line": node.lineno,
                    }
                )
    return out


def read_metrics(vllm_dir: Path) -> dict[str, dict[str, Any]]:
    """name -> {type, labels, file, line} for every metric the package at `vllm_dir` defines."""
    found: dict[str, dict[str, Any]] = {}
    for path in sorted(vllm_dir.rglob("*.py")):
        rel_parts = path.relative_to(vllm_dir).parts
        if SKIP_DIRS.intersection(rel_parts):
            continue
        rel = "vllm/" + "/".join(rel_parts)
        for m in metrics_in(path, rel):
            prev = found.get(m["name"])
            if prev is None:
                found[m["name"]] = {k: m[k] for k in ("type", "labels", "file", "line")}
            else:
                prev["labels"] = sorted(set(prev["labels"]) | set(m["labels"]))
    return dict(sorted(found.items()))


def _metadata_file(vllm_dir: Path) -> Path | None:
    for d in NIXL_DIRS:
        for name in ("metadata.py", "nixl_connector.py"):
            f = vllm_dir / d / name
            if f.is_file() and "NIXL_CONNECTOR_VERSION" in f.read_text(encoding="utf-8", errors="replace"):
                return f
    return None


def read_nixl_wire(vllm_dir: Path) -> dict[str, Any] | None:
    """The NIXL side channel's facts in this release: connector version, agent metadata fields,
    hash factors, the request message; None when the release has no versioned NIXL connector."""
    f = _metadata_file(vllm_dir)
    if f is None:
        return None
    tree = ast.parse(f.read_text(encoding="utf-8", errors="replace"))
    out: dict[str, Any] = {"file": "vllm/" + f.relative_to(vllm_dir).as_posix()}
    for node in ast.walk(tree):
        target = (
            node.target
            if isinstance(node, ast.AnnAssign)
            else node.targets[0]
            if isinstance(node, ast.Assign) and len(node.targets) == 1
            else None
        )
        value = getattr(node, "value", None)
        if isinstance(target, ast.Name) and isinstance(value, ast.Constant):
            if target.id == "NIXL_CONNECTOR_VERSION":
                out["connector_version"] = value.value
            elif target.id == "GET_META_MSG" and isinstance(value.value, bytes):
                out["get_meta_msg"] = value.value.decode()
        if isinstance(node, ast.ClassDef) and node.name in ("NixlAgentMetadata", "NixlHandshakePayload"):
            key = "agent_metadata_fields" if node.name == "NixlAgentMetadata" else "payload_fields"
            out[key] = [
                s.target.id
                for s in node.body
                if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
            ]
        if isinstance(node, ast.FunctionDef) and node.name == "compute_nixl_compatibility_hash":
            for sub in ast.walk(node):
                if isinstance(sub, ast.Assign) and isinstance(sub.value, ast.Dict):
                    keys = [k.value for k in sub.value.keys if isinstance(k, ast.Constant)]
                    if "vllm_version" in keys:
                        out["hash_factors"] = keys
    return out
