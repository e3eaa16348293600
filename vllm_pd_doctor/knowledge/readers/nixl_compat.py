"""What vLLM's NIXL compatibility hash covers, read from a release's source with `ast`.

Each NIXL engine computes `compute_nixl_compatibility_hash(vllm_config, ...)` from a dict of
factors (vLLM version, NIXL connector version, model, dtype, KV heads, attention backend, cache
dtype, HMA, speculative config, push or pull ...) and refuses a peer whose hash differs unless
`kv_connector_extra_config.enforce_handshake_compat` is false. The factors and the connector
version differ per release, so they are read from the release, never listed here.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

FUNCTION = "compute_nixl_compatibility_hash"
VERSION_CONSTANT = "NIXL_CONNECTOR_VERSION"
_DIR = "distributed/kv_transfer/kv_connector"


@dataclass(frozen=True)
class HashFactors:
    """The factors one release's hash covers (empty: the function was not found)."""

    release: str | None
    factors: tuple[str, ...] = ()
    """The keys of the factors dict, in source order (`vllm_version`, `model`, `dtype` ...)."""
    connector_version: int | None = None
    location: str | None = None
    """`vllm/.../nixl/metadata.py:145` (relative to site-packages)."""

    def covers(self, factor: str) -> bool:
        return factor in self.factors


def _factors(fn: ast.FunctionDef) -> tuple[str, ...]:
    for node in ast.walk(fn):
        if (
            isinstance(node, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "factors" for t in node.targets)
            and isinstance(node.value, ast.Dict)
        ):
            return tuple(
                k.value for k in node.value.keys if isinstance(k, ast.Constant) and isinstance(k.value, str)
            )
    return ()


def _version(tree: ast.Module) -> int | None:
    for node in tree.body:
        target: ast.expr | None = None
        if isinstance(node, ast.AnnAssign):
            target = node.target
        elif isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if (
            isinstance(target, ast.Name)
            and target.id == VERSION_CONSTANT
            and isinstance(value, ast.Constant)
            and isinstance(value.value, int)
        ):
            return value.value
    return None


@functools.lru_cache(maxsize=16)
def read(vllm_path: Path, release: str | None = None) -> HashFactors:
    """The hash factors of the vLLM package at `vllm_path` (the `vllm/` directory)."""
    base = vllm_path / _DIR
    found: HashFactors | None = None
    version: int | None = None
    for p in sorted(base.rglob("*.py")) if base.is_dir() else []:
        if "nixl" not in p.as_posix().lower():
            continue
        try:
            src = p.read_text(encoding="utf-8")
            if FUNCTION not in src and VERSION_CONSTANT not in src:
                continue
            tree = ast.parse(src, filename=str(p))
        except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
            continue
        version = version if version is not None else _version(tree)
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == FUNCTION and found is None:
                rel = p.relative_to(vllm_path.parent).as_posix()
                found = HashFactors(release, _factors(node), None, f"{rel}:{node.lineno}")
    if found is None:
        return HashFactors(release, connector_version=version)
    return HashFactors(found.release, found.factors, version, found.location)
