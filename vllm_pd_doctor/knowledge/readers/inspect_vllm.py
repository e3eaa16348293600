"""Find where the installed vLLM truncates the P-side prompt, by reading its source with `ast`.

Nothing is imported: the connector package is walked file by file, functions whose name holds
both "truncate" and "prefill" are the truncation helpers, and the methods that call them say
when truncation runs (`on_new_request`: before the local prefix-cache lookup, fixed;
`get_num_new_matched_tokens`: after it, exposed to vLLM #53514).
"""

from __future__ import annotations

import ast
import os
import re
from pathlib import Path

from vllm_pd_doctor.knowledge.facts import connectors
from vllm_pd_doctor.knowledge.readers.facts import ConvLayoutOverride, SourceFact, TruncationSite, VllmSource

CONNECTOR_DIRS = ("distributed/kv_transfer/kv_connector",)
_is_helper = connectors.is_truncation_helper


def _family(rel: str) -> str | None:
    """The source word (registry) of the connector family whose code lives at `rel`."""
    low = rel.lower()
    for c in connectors.by_source_path(rel):
        for w in c.source_words:
            if w in low:
                return w
    return None


class _Calls(ast.NodeVisitor):
    def __init__(self, helpers: set[str]) -> None:
        self.helpers = helpers
        self.stack: list[tuple[str, str | None]] = []
        self.cls: list[str] = []
        self.found: list[tuple[str, str, str | None, int]] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.cls.append(node.name)
        self.generic_visit(node)
        self.cls.pop()

    def _func(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.stack.append((node.name, self.cls[-1] if self.cls else None))
        self.generic_visit(node)
        self.stack.pop()

    visit_FunctionDef = _func
    visit_AsyncFunctionDef = _func

    def visit_Call(self, node: ast.Call) -> None:
        f = node.func
        name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None
        if name in self.helpers and self.stack:
            caller, cls = self.stack[-1]
            self.found.append((name, caller, cls, node.lineno))
        self.generic_visit(node)


def find_sites(vllm_path: Path) -> tuple[TruncationSite, ...]:
    """Every call of a truncation helper in the KV connector packages."""
    root = vllm_path.parent
    trees: list[tuple[str, ast.Module]] = []
    for sub in CONNECTOR_DIRS:
        base = vllm_path / sub
        if not base.is_dir():
            continue
        for dirpath, dirnames, filenames in os.walk(base):
            dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
            for fn in sorted(filenames):
                if not fn.endswith(".py"):
                    continue
                p = Path(dirpath) / fn
                rel = p.relative_to(root).as_posix()
                if _family(rel) is None:
                    continue
                try:
                    src = p.read_text(encoding="utf-8")
                except (OSError, UnicodeDecodeError):
                    continue
                if "truncate" not in src:
                    continue
                try:
                    trees.append((rel, ast.parse(src, filename=rel)))
                except (SyntaxError, ValueError):
                    continue
    helpers: set[str] = set()
    for _rel, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _is_helper(node.name):
                helpers.add(node.name)
    sites: list[TruncationSite] = []
    for rel, tree in trees:
        v = _Calls(helpers)
        v.visit(tree)
        fam = _family(rel) or "?"
        for helper, caller, cls, line in v.found:
            if _is_helper(caller):
                continue  # a helper calling a helper; its own callers are what count
            sites.append(
                TruncationSite(
                    connector=fam, helper=helper, caller=caller, caller_class=cls, file=rel, line=line
                )
            )
    return tuple(sites)


def sites_for(connector_key: str, sites: tuple[TruncationSite, ...]) -> tuple[TruncationSite, ...]:
    """The sites that apply to one of our connector keys (nixl = pull, nixl-push, ...)."""
    c = connectors.get(connector_key)
    if c is None:
        return ()
    return tuple(s for s in sites if c.owns_source(s.connector, s.file))


def registered_connectors(vllm_path: Path) -> tuple[str, ...]:
    f = vllm_path / "distributed/kv_transfer/kv_connector/factory.py"
    try:
        src = f.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ()
    return tuple(dict.fromkeys(re.findall(r'register_connector\(\s*"([A-Za-z0-9_]+)"', src)))


def side_channel_port_default(vllm_path: Path) -> int | None:
    try:
        src = (vllm_path / "envs.py").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    m = re.search(r'getenv\(\s*"VLLM_NIXL_SIDE_CHANNEL_PORT"\s*,\s*"(\d+)"', src)
    return int(m.group(1)) if m else None


def kv_roles(vllm_path: Path) -> tuple[str, ...]:
    try:
        src = (vllm_path / "config" / "kv_transfer.py").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return ()
    roles: list[str] = []
    for m in re.finditer(r"^KV(?:Producer|Consumer)\s*=\s*Literal\[([^\]]*)\]", src, re.M):
        roles.extend(re.findall(r'"([a-z_]+)"', m.group(1)))
    return tuple(dict.fromkeys(roles))


CONV_LAYOUT_ENV = "VLLM_SSM_CONV_STATE_LAYOUT"


def _is_environ(node: ast.AST) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == "environ"


def _guards_explicit_setting(test: ast.AST, names: set[str]) -> bool:
    """`X not in os.environ` (X the variable's name or a name bound to it)."""
    for node in ast.walk(test):
        if (
            isinstance(node, ast.Compare)
            and any(isinstance(op, ast.NotIn) for op in node.ops)
            and any(_is_environ(c) for c in node.comparators)
        ):
            left = node.left
            if (isinstance(left, ast.Constant) and left.value == CONV_LAYOUT_ENV) or (
                isinstance(left, ast.Name) and left.id in names
            ):
                return True
    return False


def cpu_conv_layout_override(vllm_path: Path) -> ConvLayoutOverride | None:
    """An unguarded `os.environ["VLLM_SSM_CONV_STATE_LAYOUT"] = ...` in platforms/cpu.py."""
    f = vllm_path / "platforms" / "cpu.py"
    try:
        tree = ast.parse(f.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, SyntaxError):
        return None
    names = {
        t.id
        for n in ast.walk(tree)
        if isinstance(n, ast.Assign)
        and isinstance(n.value, ast.Constant)
        and n.value.value == CONV_LAYOUT_ENV
        for t in n.targets
        if isinstance(t, ast.Name)
    }

    def visit(node: ast.AST, ifs: tuple[ast.If, ...]) -> ConvLayoutOverride | None:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            for t in node.targets:
                if not (isinstance(t, ast.Subscript) and _is_environ(t.value)):
                    continue
                key = t.slice
                if not (
                    (isinstance(key, ast.Constant) and key.value == CONV_LAYOUT_ENV)
                    or (isinstance(key, ast.Name) and key.id in names)
                ):
                    continue
                if any(_guards_explicit_setting(i.test, names) for i in ifs):
                    continue
                return ConvLayoutOverride(
                    file="vllm/platforms/cpu.py",
                    line=node.lineno,
                    value=str(node.value.value),
                    condition=ast.unparse(ifs[-1].test) if ifs else None,
                )
        for child in ast.iter_child_nodes(node):
            found = visit(child, (*ifs, node) if isinstance(node, ast.If) else ifs)
            if found is not None:
                return found
        return None

    return visit(tree, ())


def _nixl_worker_trees(vllm_path: Path) -> list[tuple[str, ast.Module]]:
    """The NIXL connector's worker-side modules (`nixl/*worker*.py`, or `nixl_connector.py`)."""
    root = vllm_path.parent
    out: list[tuple[str, ast.Module]] = []
    for sub in CONNECTOR_DIRS:
        base = vllm_path / sub
        if not base.is_dir():
            continue
        for p in sorted(base.rglob("*.py")):
            rel = p.relative_to(root).as_posix()
            low = rel.lower()
            if "nixl" not in low or not ("worker" in p.name or p.name == "nixl_connector.py"):
                continue
            try:
                src = p.read_text(encoding="utf-8")
                if "mamba" in src.lower() or "P_TP" in src:
                    out.append((rel, ast.parse(src, filename=rel)))
            except (OSError, UnicodeDecodeError, SyntaxError, ValueError):
                continue
    return out


def _message(node: ast.AST) -> str:
    """The string constants of a raise / assert message, joined."""
    return " ".join(
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    )


_MAMBA_WORDS = ("mamba", "ssm", "hybrid")


def mamba_hetero_tp(trees: list[tuple[str, ast.Module]]) -> SourceFact | None:
    """Does the NIXL worker move Mamba state between different TP sizes?

    Yes: a Mamba method takes the TP ratio / remote TP size (it maps sub-projections across
    ranks, e.g. `_build_mamba_remote(self, meta, tp_ratio, ...)`). No: a raise or assert whose
    message ties Mamba/SSM/hybrid to tensor parallelism and "not supported"/"equal"/"same".
    """
    refusal: SourceFact | None = None
    for rel, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and "mamba" in node.name.lower():
                tp_args = [
                    a.arg for a in node.args.args + node.args.kwonlyargs if "tp" in a.arg.lower().split("_")
                ]
                if tp_args:
                    return SourceFact(
                        True,
                        f"{rel}:{node.lineno}",
                        f"{node.name}() takes {', '.join(tp_args)}: Mamba state is "
                        "split across different prefill/decode TP sizes",
                    )
            if refusal is None and isinstance(node, (ast.Raise, ast.Assert)):
                msg = _message(
                    node.exc
                    if isinstance(node, ast.Raise) and node.exc
                    else node.msg
                    if isinstance(node, ast.Assert) and node.msg
                    else node
                )
                low = msg.lower()
                if (
                    any(w in low for w in _MAMBA_WORDS)
                    and re.search(r"\btp\b|tensor.parallel|tp_size", low)
                    and re.search(r"not supported|unsupported|must (be )?(equal|match)|same", low)
                ):
                    refusal = SourceFact(False, f"{rel}:{node.lineno}", msg.strip()[:160])
    return refusal


def mamba_hetero_block(trees: list[tuple[str, ast.Module]]) -> SourceFact | None:
    """A raise tying heterogeneous blocks + prefix caching to Mamba: the worker handles Mamba
    across block sizes, except with prefix caching (0.28.0: "Prefix caching with heterogeneous
    physical_blocks_per_logical is not supported for Mamba hybrid models")."""
    for rel, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and node.exc is not None:
                msg = _message(node.exc)
                low = msg.lower()
                if "prefix caching" in low and "heterogeneous" in low and any(w in low for w in _MAMBA_WORDS):
                    text = " ".join(msg.split()).split(" Local:")[0]
                    return SourceFact(True, f"{rel}:{node.lineno}", text[:200])
    return None


def p_tp_above_d_tp(trees: list[tuple[str, ast.Module]]) -> SourceFact | None:
    """Does the NIXL worker read from a prefill with more TP ranks (a P_TP > D_TP path)?"""
    for rel, tree in trees:
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                doc = ast.get_docstring(node) or ""
                if re.search(r"P_TP\s*>\s*D_TP", doc):
                    return SourceFact(
                        True, f"{rel}:{node.lineno}", f"{node.name}(): {doc.splitlines()[0].strip()}"
                    )
    return None


def attention_backend_env(vllm_path: Path) -> bool | None:
    """vllm/envs.py still defines VLLM_ATTENTION_BACKEND (later releases dropped it)."""
    try:
        src = (vllm_path / "envs.py").read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None
    return '"VLLM_ATTENTION_BACKEND"' in src


def read_source(python: str, vllm_path: str | None, version: str | None) -> VllmSource:
    """Everything check-config reads from the installed vLLM (cached per install)."""
    if vllm_path is None:
        return VllmSource(
            python=python, version=version, path=None, error="no vLLM installed in this interpreter"
        )
    from vllm_pd_doctor.knowledge.readers import inspect_config, source_cache

    p = Path(vllm_path)
    key = source_cache.stamp(p, ("envs.py", *inspect_config.stamp_files()), CONNECTOR_DIRS)
    return source_cache.cached(python, p, version, key, lambda: _read_source(python, vllm_path, version))


def _read_source(python: str, vllm_path: str, version: str | None) -> VllmSource:
    from vllm_pd_doctor.knowledge.readers import inspect_config as ic

    p = Path(vllm_path)
    kv = ic.kv_transfer_fields(p) or ((), None, None)
    try:
        sites = find_sites(p)
        workers = _nixl_worker_trees(p)
    except OSError as exc:
        return VllmSource(
            python=python, version=version, path=vllm_path, error=f"cannot read vLLM's sources: {exc}"
        )
    return VllmSource(
        python=python,
        version=version,
        path=vllm_path,
        sites=sites,
        connectors=registered_connectors(p),
        side_channel_port_default=side_channel_port_default(p),
        kv_roles=kv_roles(p),
        cpu_conv_layout_override=cpu_conv_layout_override(p),
        mamba_hetero_tp=mamba_hetero_tp(workers),
        p_tp_above_d_tp=p_tp_above_d_tp(workers),
        mamba_hetero_block=mamba_hetero_block(workers),
        attention_backend_env=attention_backend_env(p),
        mamba_prefix_rewrite=ic.mamba_prefix_rewrite(p),
        conv_layout_assert=ic.conv_layout_assert(workers),
        conv_layout_default=ic.conv_layout_default(p),
        cpu_selects_ds=ic.cpu_selects_ds(p),
        kv_transfer_fields=kv[0],
        kv_transfer_forbids_extra=kv[1],
        kv_transfer_location=kv[2],
    )
