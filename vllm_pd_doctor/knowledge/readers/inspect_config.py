"""Decisions vLLM takes in its own config code, read from the installed source with `ast`.

- whether prefix caching turns `mamba_cache_mode="none"` into another mode (0.28.0:
  `MambaModelConfig.verify_and_update_config` sets "align"), so `--enable-prefix-caching
  --mamba-cache-mode none` still caches prefixes;
- the fields of `KVTransferConfig` and whether the class forbids other keys (vLLM's `@config`
  decorator: a pydantic dataclass with `extra="forbid"`), so an unknown kv-transfer-config key is
  rejected as vLLM would;
- the SSM conv-state layout: where the NIXL worker asserts DS, the layout used when
  `VLLM_SSM_CONV_STATE_LAYOUT` is unset, and whether the CPU platform selects DS for NIXL itself.

Nothing is imported; every reader returns None when the code it looks for is not there.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

from vllm_pd_doctor.knowledge.readers.facts import SourceFact

CONFIG_FILES = (
    "model_executor/models/config.py",
    "config/cache.py",
    "config/vllm.py",
    "config/kv_transfer.py",
    "config/utils.py",
    "model_executor/layers/mamba/mamba_utils.py",
)
"""Files these readers look at first (also the cache stamp); others are found by content."""
CONV_ENV = "VLLM_SSM_CONV_STATE_LAYOUT"


def _parse(path: Path) -> ast.Module | None:
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
        return None


def _rel(vllm_path: Path, p: Path) -> str:
    return p.relative_to(vllm_path.parent).as_posix()


def _files_with(vllm_path: Path, dirs: tuple[str, ...], needle: str) -> Iterator[Path]:
    for d in dirs:
        base = vllm_path / d
        if base.is_file():
            cands = [base]
        elif base.is_dir():
            cands = sorted(p for p in base.glob("*.py"))
        else:
            continue
        for p in cands:
            try:
                if needle in p.read_text(encoding="utf-8"):
                    yield p
            except (OSError, UnicodeDecodeError):
                continue


def _mentions_attr(node: ast.AST, attr: str) -> bool:
    return any(isinstance(n, ast.Attribute) and n.attr == attr for n in ast.walk(node))


def _compares_to(test: ast.AST, attr: str, value: str) -> bool:
    """`<x>.attr == "value"`."""
    return (
        isinstance(test, ast.Compare)
        and len(test.ops) == 1
        and isinstance(test.ops[0], ast.Eq)
        and isinstance(test.left, ast.Attribute)
        and test.left.attr == attr
        and isinstance(test.comparators[0], ast.Constant)
        and test.comparators[0].value == value
    )


def _assigned(body: list[ast.stmt], attr: str) -> ast.Assign | None:
    for stmt in body:
        for n in ast.walk(stmt):
            if (
                isinstance(n, ast.Assign)
                and any(isinstance(t, ast.Attribute) and t.attr == attr for t in n.targets)
                and isinstance(n.value, ast.Constant)
            ):
                return n
    return None


def mamba_prefix_rewrite(vllm_path: Path) -> SourceFact | None:
    """`if <cfg>.enable_prefix_caching: ... if <cfg>.mamba_cache_mode == "none": <cfg>.mamba_cache_mode = X`:
    supported=True with X in the detail. None: no such code (prefix caching leaves "none" alone)."""
    for p in _files_with(vllm_path, ("model_executor/models/config.py", "config"), "mamba_cache_mode"):
        tree = _parse(p)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if not (isinstance(node, ast.If) and _mentions_attr(node.test, "enable_prefix_caching")):
                continue
            if isinstance(node.test, ast.UnaryOp):  # `if not ...enable_prefix_caching`
                continue
            for inner in ast.walk(ast.Module(body=node.body, type_ignores=[])):
                if isinstance(inner, ast.If) and _compares_to(inner.test, "mamba_cache_mode", "none"):
                    a = _assigned(inner.body, "mamba_cache_mode")
                    if a is not None and isinstance(a.value, ast.Constant):
                        return SourceFact(
                            True,
                            f"{_rel(vllm_path, p)}:{a.lineno}",
                            f"with prefix caching on, vLLM sets mamba_cache_mode {a.value.value!r} "
                            "where it was 'none'",
                        )
    return None


def _decorator_forbids_extra(vllm_path: Path, name: str) -> bool | None:
    """Does the decorator function `name` (vllm/config/utils.py or beside it) pass extra="forbid"?"""
    found: bool | None = None
    for p in _files_with(vllm_path, ("config/utils.py", "config"), f"def {name}"):
        tree = _parse(p)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == name:  # overload stubs too
                found = bool(found) or any(
                    isinstance(n, ast.keyword)
                    and n.arg == "extra"
                    and isinstance(n.value, ast.Constant)
                    and n.value.value == "forbid"
                    for n in ast.walk(node)
                )
        if found is not None:
            return found
    return None


def kv_transfer_fields(vllm_path: Path) -> tuple[tuple[str, ...], bool | None, str] | None:
    """(field names, forbids other keys, file:line) of the installed KVTransferConfig class."""
    for p in _files_with(vllm_path, ("config/kv_transfer.py", "config"), "class KVTransferConfig"):
        tree = _parse(p)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef) and node.name == "KVTransferConfig":
                fields = tuple(
                    s.target.id
                    for s in node.body
                    if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
                )
                forbids: bool | None = None
                for d in node.decorator_list:
                    fn = d.func if isinstance(d, ast.Call) else d
                    if isinstance(d, ast.Call) and any(
                        isinstance(n, ast.Constant) and n.value == "forbid" for n in ast.walk(d)
                    ):
                        forbids = True
                    elif isinstance(fn, ast.Name):
                        forbids = forbids or _decorator_forbids_extra(vllm_path, fn.id)
                return fields, forbids, f"{_rel(vllm_path, p)}:{node.lineno}"
    return None


def conv_layout_default(vllm_path: Path) -> str | None:
    """The layout `get_conv_state_layout()` returns when the variable is unset (its last return)."""
    for p in _files_with(
        vllm_path, ("model_executor/layers/mamba/mamba_utils.py",), "def get_conv_state_layout"
    ):
        tree = _parse(p)
        if tree is None:
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and node.name == "get_conv_state_layout":
                rets = [
                    n.value.value
                    for n in ast.walk(node)
                    if isinstance(n, ast.Return)
                    and isinstance(n.value, ast.Constant)
                    and isinstance(n.value.value, str)
                ]
                return str(rets[-1]) if rets else None
    return None


def conv_layout_assert(trees: list[tuple[str, ast.Module]]) -> SourceFact | None:
    """An assert/raise in the NIXL worker that demands the DS conv-state layout."""
    for rel, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Assert):
                msg_node, line = node.msg, node.lineno
            elif isinstance(node, ast.Raise):
                msg_node, line = node.exc, node.lineno
            else:
                continue
            if msg_node is None:
                continue
            msg = " ".join(
                n.value
                for n in ast.walk(msg_node)
                if isinstance(n, ast.Constant) and isinstance(n.value, str)
            )
            if "conv state layout" in msg.lower() or CONV_ENV in msg:
                return SourceFact(True, f"{rel}:{line}", " ".join(msg.split())[:160])
    return None


def cpu_selects_ds(vllm_path: Path) -> SourceFact | None:
    """platforms/cpu.py sets VLLM_SSM_CONV_STATE_LAYOUT to "DS" itself (0.32.0: for NIXL, when unset)."""
    p = vllm_path / "platforms" / "cpu.py"
    tree = _parse(p)
    if tree is None:
        return None
    names = {CONV_ENV} | {
        t.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and n.value.value == CONV_ENV
        for t in n.targets
        if isinstance(t, ast.Name)
    }
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and n.value.value == "DS":
            for t in n.targets:
                if isinstance(t, ast.Subscript) and (
                    (isinstance(t.slice, ast.Constant) and t.slice.value in names)
                    or (isinstance(t.slice, ast.Name) and t.slice.id in names)
                ):
                    return SourceFact(True, f"{_rel(vllm_path, p)}:{n.lineno}", "CPU platform selects DS")
    return None


def stamp_files() -> tuple[str, ...]:
    return (*CONFIG_FILES, "platforms/cpu.py")
