"""Which connector names a vLLM release's factories can load, read from its source with `ast`.

`KVConnectorFactory.register_connector("Name", "module.path", "Class")` calls at module level of
`distributed/kv_transfer/kv_connector/factory.py` are the registry; `get_connector_class` loads
any name from `kv_transfer_config.kv_connector_module_path` first when the release reads that
field. The encoder-cache factory (`distributed/ec_transfer/ec_connector/factory.py`) is read the
same way, to say when a name given as kv_connector is an encoder-cache connector.

Nothing is imported; a release pd-doctor has provisioned (`pd-doctor envs`) can be read too, for a
deployment whose own vLLM is not installed here.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass
from pathlib import Path

KV_FACTORY = "distributed/kv_transfer/kv_connector/factory.py"
EC_FACTORY = "distributed/ec_transfer/ec_connector/factory.py"
MODULE_PATH_FIELD = "kv_connector_module_path"
EC_MODULE_PATH_FIELD = "ec_connector_module_path"


@dataclass(frozen=True)
class Registered:
    name: str
    module: str
    class_name: str
    line: int


@dataclass(frozen=True)
class Registry:
    """One release's factory registries (empty: the factory file was not found or not read)."""

    release: str | None
    kv: tuple[Registered, ...] = ()
    ec: tuple[Registered, ...] = ()
    module_path: bool = False
    """`get_connector_class` loads from `kv_connector_module_path` when it is set."""
    ec_module_path: bool = False
    """The EC factory's `get_connector_class` loads from `ec_connector_module_path` when it is set."""

    @property
    def kv_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.kv)

    @property
    def ec_names(self) -> tuple[str, ...]:
        return tuple(r.name for r in self.ec)

    @property
    def read(self) -> bool:
        return bool(self.kv)


def _str(node: ast.AST) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _registrations(tree: ast.Module) -> tuple[Registered, ...]:
    out: list[Registered] = []
    for stmt in tree.body:  # module level: what importing the factory registers
        call = stmt.value if isinstance(stmt, ast.Expr) else None
        if not (
            isinstance(call, ast.Call)
            and isinstance(call.func, ast.Attribute)
            and call.func.attr == "register_connector"
            and len(call.args) >= 3
        ):
            continue
        name, module, cls = (_str(a) for a in call.args[:3])
        if name and module and cls:
            out.append(Registered(name, module, cls, stmt.lineno))
    return tuple(out)


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None


def _reads_module_path(tree: ast.Module, field: str = MODULE_PATH_FIELD) -> bool:
    """`get_connector_class` reads `<config>.<field>` (kv_ or ec_connector_module_path)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name == "get_connector_class":
            return any(isinstance(n, ast.Attribute) and n.attr == field for n in ast.walk(node))
    return False


@functools.lru_cache(maxsize=16)
def read(vllm_path: Path, release: str | None = None) -> Registry:
    """The registries of the vLLM package at `vllm_path` (the `vllm/` directory)."""
    kv_tree = _parse(vllm_path / KV_FACTORY)
    if kv_tree is None:
        return Registry(release)
    ec_tree = _parse(vllm_path / EC_FACTORY)
    return Registry(
        release=release,
        kv=_registrations(kv_tree),
        ec=_registrations(ec_tree) if ec_tree is not None else (),
        module_path=_reads_module_path(kv_tree),
        ec_module_path=ec_tree is not None and _reads_module_path(ec_tree, EC_MODULE_PATH_FIELD),
    )


def provisioned() -> tuple[Registry, ...]:
    """The registries of every vLLM release pd-doctor has provisioned (`pd-doctor envs`), oldest
    first; empty when it has none."""
    from vllm_pd_doctor.infra import envs
    from vllm_pd_doctor.knowledge.facts.releases import is_release, version_key

    out: list[Registry] = []
    for env in envs.list_envs():
        for sp in sorted(env.path.glob("lib/python*/site-packages/vllm")):
            reg = read(sp, env.version)
            if reg.read:
                out.append(reg)
                break
    return tuple(
        sorted(out, key=lambda r: version_key(r.release if r.release and is_release(r.release) else "0"))
    )
