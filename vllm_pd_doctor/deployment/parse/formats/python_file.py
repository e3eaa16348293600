"""Python files, read with `ast` (never imported or executed): Ray Serve LLM (`LLMConfig(...)`,
`build_pd_openai_app({...})`), else the vLLM commands a launcher passes to `subprocess`.
Literals, names bound to them, `dict(...)`, `**` merges and `LLMConfig(...)` calls are evaluated;
anything else stays unknown (and is left out). A Markdown page is read through its python blocks.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from typing import Any

from vllm_pd_doctor.deployment.parse.formats.ray_serve import llm_config
from vllm_pd_doctor.deployment.parse.found import Found
from vllm_pd_doctor.deployment.parse.manifests import role_from_name
from vllm_pd_doctor.deployment.parse.registry import DeploymentFormat, Source
from vllm_pd_doctor.deployment.parse.symbolic import Interp
from vllm_pd_doctor.deployment.parse.wrappers import unwrap
from vllm_pd_doctor.infra.errors import BadInput
from vllm_pd_doctor.infra.shell.words import ShellSyntaxError

_FENCE = re.compile(r"^```[ \t]*(?:python|py)[ \t]*\n(.*?)^```", re.MULTILINE | re.DOTALL)
_MARK = ("LLMConfig(", "build_pd_openai_app", "build_openai_app")
_EXES = ("vllm", "python", "uv", "env", "numactl", "taskset")


class _Unknown:
    """A value the file does not give as a literal."""


UNKNOWN = _Unknown()


class _LLM(dict[str, Any]):
    """The keyword arguments of one `LLMConfig(...)` call."""


def sniff(src: Source) -> bool:
    return src.suffix == ".py" or any(m in src.text for m in _MARK)


def read(src: Source) -> list[Found] | None:
    found = from_python(src.text, src.label)
    if found is None and src.suffix == ".py":
        raise BadInput(
            f"{src.label}: no vLLM server in this Python file (read with ast, not run): neither "
            "Ray Serve LLMConfig(...) nor a `vllm serve` command list or string",
            hint="give the launch commands with --prefill-cmd / --decode-cmd",
        )
    return found


FORMAT = DeploymentFormat("python-file", sniff, read)


def _code(text: str) -> str:
    blocks = [m.group(1) for m in _FENCE.finditer(text)]
    return "\n".join(blocks) if blocks else text


class _Eval:
    def __init__(self) -> None:
        self.names: dict[str, Any] = {}
        self.llms: list[list[Any]] = []
        """(the name it was bound to or '', config) in order of appearance."""
        self.pd: list[Any] = []
        self.apps: list[Any] = []

    def stmt(self, node: ast.stmt) -> None:
        if isinstance(node, ast.Assign):
            val = self.ev(node.value)
            for t in node.targets:
                if isinstance(t, ast.Name):
                    self.names[t.id] = val
                    for entry in self.llms:
                        if entry[1] is val and not entry[0]:
                            entry[0] = t.id
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            self.names[node.target.id] = self.ev(node.value)
        elif isinstance(node, ast.Expr):
            self.ev(node.value)
        elif isinstance(node, (ast.If, ast.With, ast.FunctionDef, ast.Try)):
            for sub in getattr(node, "body", []):
                self.stmt(sub)

    def ev(self, node: ast.expr) -> Any:
        if isinstance(node, ast.Constant):
            return node.value
        if isinstance(node, ast.Name):
            return self.names.get(node.id, UNKNOWN)
        if isinstance(node, (ast.List, ast.Tuple)):
            return [self.ev(e) for e in node.elts]
        if isinstance(node, ast.Dict):
            out: dict[Any, Any] = {}
            for k, v in zip(node.keys, node.values, strict=True):
                val = self.ev(v)
                if k is None:
                    if isinstance(val, dict):
                        out.update(val)
                else:
                    key = self.ev(k)
                    if isinstance(key, str):
                        out[key] = val
            return out
        if isinstance(node, ast.Call):
            return self.call(node)
        return UNKNOWN

    def kwargs(self, node: ast.Call) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for kw in node.keywords:
            val = self.ev(kw.value)
            if kw.arg is None:
                if isinstance(val, dict):
                    out.update(val)
            else:
                out[kw.arg] = val
        return out

    def call(self, node: ast.Call) -> Any:
        f = node.func
        fname = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
        args = [self.ev(a) for a in node.args]
        if fname == "LLMConfig":
            llm = _LLM(self.kwargs(node))
            self.llms.append(["", llm])  # named when assigned (the name may tell the role)
            return llm
        if fname == "dict":
            base = args[0] if args and isinstance(args[0], dict) else {}
            return {**base, **self.kwargs(node)}
        if fname in ("build_pd_openai_app", "build_pd_app"):
            self.pd.append(args[0] if args else self.kwargs(node))
        elif fname in ("build_openai_app", "build_llm_deployment"):
            self.apps.append(args[0] if args else self.kwargs(node))
        elif fname in ("run", "deploy"):
            pass
        return UNKNOWN


def _plain(v: Any) -> Any:
    """Values for the engine flags: unknown parts dropped."""
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items() if x is not UNKNOWN}
    if isinstance(v, list):
        return [_plain(x) for x in v if x is not UNKNOWN]
    return v


def from_python(text: str, label: str) -> list[Found] | None:
    """The engines a Ray Serve LLM Python file configures; None when it configures none."""
    try:
        tree = ast.parse(_code(text))
    except (SyntaxError, ValueError, RecursionError):
        return None
    ev = _Eval()
    try:
        for node in tree.body:
            ev.stmt(node)
    except RecursionError:
        return None
    out: list[Found] = []
    used: set[int] = set()
    for pd in ev.pd:
        if not isinstance(pd, Mapping):
            continue
        for key, role in (("prefill_config", "prefill"), ("decode_config", "decode")):
            cfg = pd.get(key)
            if isinstance(cfg, Mapping):
                used.add(id(cfg))
                f = llm_config(_plain(dict(cfg)), role, role, f"build_pd_openai_app {key}")
                f.launcher = "Ray Serve LLM (Python) > vLLM engine"
                out.append(f)
    for name, llm in ev.llms:
        if id(llm) in used:
            continue
        named = role_from_name(name)
        f = llm_config(_plain(dict(llm)), named, name or "llm", f"variable name {name}" if named else "")
        f.launcher = "Ray Serve LLM (Python) > vLLM engine"
        out.append(f)
    return out or _commands(tree, ev) or None


def _commands(tree: ast.AST, ev: _Eval) -> list[Found]:
    """`subprocess.Popen(["vllm", "serve", MODEL, "--port", "8100", ...])` and command strings
    (`"vllm serve ..."`): literal parts only; a flag whose value is not a literal is left out."""
    out: list[Found] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.List, ast.Tuple)) and len(node.elts) >= 2:
            items = [ev.ev(e) for e in node.elts]
            if not (isinstance(items[0], str) and items[0].rsplit("/", 1)[-1].startswith(_EXES)):
                continue
            argv: list[str] = []
            for item in items:
                if isinstance(item, (str, int, float)):
                    argv.append(str(item))
                elif argv and argv[-1].startswith("-"):
                    argv.pop()
            got = unwrap(argv, {}, launcher="python subprocess > ")
            if isinstance(got, Found):
                out.append(got)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and "vllm serve " in node.value:
            it = Interp({})
            try:
                it.run_text(node.value)
            except ShellSyntaxError:
                continue
            out.extend(it.found)
    return out
