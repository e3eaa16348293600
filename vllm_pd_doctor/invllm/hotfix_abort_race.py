"""The abort-race hotfix (vllm#46240; PRs #46304 / #56089, NOT MERGED upstream). Stdlib + vLLM.

In `Scheduler._update_from_kv_xfer_finished`, each `assert req_id in self.requests` heading a loop over
`finished_recving` / `finished_sending` becomes `if req_id not in self.requests: continue`: the
method's own source, recompiled with its file and line numbers, one statement kind changed. "not
needed" where every such loop already skips a request it no longer holds; refused where the method
has another shape.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from typing import Any

from . import hotfix_source as src

XFER = "_update_from_kv_xfer_finished"
XFER_LISTS = ("finished_recving", "finished_sending")


def _membership(test: ast.AST, var: str, op: type[ast.cmpop]) -> bool:
    """`var in self.requests` (op In) or `var not in self.requests` (op NotIn)."""
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == var
        and len(test.ops) == 1
        and isinstance(test.ops[0], op)
        and src.is_self_attr(test.comparators[0], "requests")
    )


def xfer_loops(fn: ast.FunctionDef) -> list[tuple[str, ast.For]]:
    """(list name, loop) of each `for <name> in <...>.finished_recving/_sending ...` in `fn`."""
    out = []
    for n in ast.walk(fn):
        if isinstance(n, ast.For) and isinstance(n.target, ast.Name):
            kinds = [
                a.attr for a in ast.walk(n.iter) if isinstance(a, ast.Attribute) and a.attr in XFER_LISTS
            ]
            if kinds:
                out.append((kinds[0], n))
    return sorted(out, key=lambda x: x[1].lineno)


def loop_assert(loop: ast.For) -> ast.Assert | None:
    """The `assert <var> in self.requests` at the top level of the loop's body."""
    var = loop.target.id if isinstance(loop.target, ast.Name) else ""
    return next(
        (s for s in loop.body if isinstance(s, ast.Assert) and _membership(s.test, var, ast.In)),
        None,
    )


def _loop_skips(loop: ast.For) -> bool:
    var = loop.target.id if isinstance(loop.target, ast.Name) else ""
    return any(
        isinstance(s, ast.If)
        and _membership(s.test, var, ast.NotIn)
        and any(isinstance(b, ast.Continue) for b in s.body)
        for s in loop.body
    )


def plan(cs: src.ClassSource) -> dict[str, Any]:
    fn = cs.methods.get(XFER)
    e = src.entry("abort-race", cs, XFER, fn)
    if fn is None:
        return src.out(e, "refused", f"{src.CLASS} has no {XFER} here")
    loops = xfer_loops(fn)
    if "finished_sending" not in {k for k, _ in loops}:
        return src.out(e, "refused", f"{XFER} has no loop over finished_sending: unexpected shape")
    sites = [(k, loop_assert(loop)) for k, loop in loops]
    asserts = [(k, a) for k, a in sites if a is not None]
    if not asserts:
        if all(_loop_skips(loop) for _, loop in loops):
            return src.out(e, "not needed", f"{XFER} already skips a request it no longer holds")
        return src.out(
            e, "refused", f"{XFER} neither asserts nor skips a request it no longer holds: unexpected shape"
        )
    why = src.recompilable(fn)
    if why is not None:
        return src.out(e, "refused", f"{why}: its source cannot be recompiled on its own")
    e["sites"] = [cs.at(a) for _, a in asserts]
    return src.out(
        e,
        "patch",
        f"{XFER} asserts `req_id in self.requests` in its "
        f"{' and '.join(k for k, _ in asserts)} loop{'s' if len(asserts) > 1 else ''} "
        f"({', '.join(e['sites'])}): a transfer reported "
        "finished for a request an earlier loop (or step) freed kills EngineCore",
    )


class _SkipFreed(ast.NodeTransformer):
    """`assert <var> in self.requests` heading an xfer loop -> `if <var> not in self.requests: continue`."""

    def __init__(self, targets: set[int]) -> None:
        self.targets = targets
        self.done = 0

    def visit_Assert(self, node: ast.Assert) -> ast.AST:
        if id(node) not in self.targets:
            return node
        assert isinstance(node.test, ast.Compare)
        self.done += 1
        test = ast.Compare(left=node.test.left, ops=[ast.NotIn()], comparators=node.test.comparators)
        return ast.copy_location(ast.If(test=test, body=[ast.Continue()], orelse=[]), node)


def recompiled(fn: Any, want: int) -> Any:
    """The method recompiled from its own source with its xfer-loop asserts turned into skips."""
    lines, first = inspect.getsourcelines(fn)
    tree = ast.parse(textwrap.dedent("".join(lines)))
    node = tree.body[0]
    if not isinstance(node, ast.FunctionDef):
        raise ValueError("not a plain def")
    targets = {id(a) for _, loop in xfer_loops(node) if (a := loop_assert(loop)) is not None}
    tr = _SkipFreed(targets)
    tree = ast.fix_missing_locations(tr.visit(tree))
    if tr.done != want:
        raise ValueError(f"found {tr.done} asserts in the loaded method, the source has {want}")
    ast.increment_lineno(tree, first - 1)
    code = compile(tree, inspect.getsourcefile(fn) or "<scheduler>", "exec")
    ns: dict[str, Any] = {}
    exec(code, fn.__globals__, ns)  # vLLM's own method, one statement kind changed
    new = ns[node.name]
    new.__qualname__, new.__module__ = fn.__qualname__, fn.__module__
    new.__defaults__, new.__kwdefaults__ = fn.__defaults__, fn.__kwdefaults__
    return new
