"""`vllm serve`'s own argument parser, described flag by flag.

Runs INSIDE the target vLLM interpreter (stdlib + vllm only): `python -m <pkg>.serve_parser --out
FILE`. It builds the parser exactly as `vllm serve` does (the serve subcommand module's own
`make_arg_parser` on its own `FlexibleArgumentParser`, wherever the release keeps them) and writes,
per long option: whether it takes a value (nargs), whether it is a boolean (store_true/false,
BooleanOptionalAction with its --no- form), its choices and its type's name. Nothing is started.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
from typing import Any

SERVE_MODULES = ("vllm.entrypoints.cli.serve",)
"""Where `vllm serve` builds its parser (every release since the `vllm` CLI exists)."""


def _serve_parser() -> argparse.ArgumentParser:
    mod = importlib.import_module(SERVE_MODULES[0])
    make = getattr(mod, "make_arg_parser", None)
    flexible = getattr(mod, "FlexibleArgumentParser", None)
    if make is None or flexible is None:
        raise RuntimeError(f"{SERVE_MODULES[0]} has no make_arg_parser/FlexibleArgumentParser")
    parser: argparse.ArgumentParser = make(flexible(prog="vllm serve"))
    return parser


def _kind(action: argparse.Action) -> dict[str, Any]:
    """One option's arity and type as argparse reads it."""
    out: dict[str, Any] = {}
    if isinstance(action, argparse.BooleanOptionalAction):
        out["bool"] = "optional"  # --x / --no-x
    elif isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        out["bool"] = "switch"
    elif action.nargs == 0:
        out["bool"] = "const"
    else:
        out["nargs"] = action.nargs if action.nargs is not None else 1
        t = action.type
        if t is not None:
            out["type"] = getattr(t, "__name__", type(t).__name__)
        if action.choices is not None:
            try:
                out["choices"] = sorted(str(c) for c in action.choices)
            except TypeError:
                pass
    return out


def describe() -> dict[str, Any]:
    parser = _serve_parser()
    flags: dict[str, Any] = {}
    aliases: dict[str, str] = {}
    for action in parser._actions:
        longs = [o[2:] for o in action.option_strings if o.startswith("--")]
        if not longs or longs[0] == "help":
            continue
        main = longs[0]
        if isinstance(action, argparse.BooleanOptionalAction):
            longs = [x for x in longs if not x.startswith("no-") or x[3:] not in longs]
        flags[main] = _kind(action)
        for o in action.option_strings:
            if o.startswith("--") and o[2:] != main and not (o[2:].startswith("no-") and o[5:] in longs):
                aliases[o[2:]] = main
            elif not o.startswith("--"):
                aliases[o[1:]] = main
    import vllm

    return {"vllm": getattr(vllm, "__version__", None), "flags": flags, "aliases": aliases}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ns = ap.parse_args()
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    answer = describe()
    with open(ns.out, "w", encoding="utf-8") as fh:
        json.dump(answer, fh)


if __name__ == "__main__":
    main()
