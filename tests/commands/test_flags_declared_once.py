"""Every flag is declared once (issue 31 item 4): walk every command's parameters, group them by flag,
and each flag has one declaration object (an `Annotated` alias of commands/_common.py or a command's
own table), so it means the same in every command that takes it.

`NOT_YET` lists the flags still declared in more than one place, with their declaring commands; the
test fails when a new flag is declared twice and when one of these becomes single (strike it)."""

from __future__ import annotations

import inspect
from collections import defaultdict
from collections.abc import Iterator
from typing import Any, get_args

import typer

from vllm_pd_doctor import cli

NOT_YET: dict[str, int] = {}
"""Flag -> how many declarations it has today (issue 31 item 4 is to bring each to 1)."""


def _commands(app: typer.Typer, path: tuple[str, ...] = ()) -> Iterator[tuple[str, Any]]:
    for c in app.registered_commands:
        yield " ".join((*path, c.name or c.callback.__name__)), c.callback  # type: ignore[union-attr]
    for g in app.registered_groups:
        assert g.typer_instance is not None
        yield from _commands(g.typer_instance, (*path, g.name or ""))


def _info(p: inspect.Parameter) -> Any:
    found = [a for a in get_args(p.annotation)[1:] if isinstance(a, typer.models.ParameterInfo)]
    if found:
        return found[-1]
    return p.default if isinstance(p.default, typer.models.ParameterInfo) else None


def declarations() -> dict[str, dict[int, list[str]]]:
    """flag -> {id of its declaration: the commands that use it}."""
    out: dict[str, dict[int, list[str]]] = defaultdict(dict)
    for name, callback in _commands(cli.build_app()):
        for p in inspect.signature(callback, eval_str=True).parameters.values():
            info = _info(p)
            if info is None:
                continue
            decls = [d for d in (info.default, *(info.param_decls or ())) if isinstance(d, str)]
            flag = next((d for d in decls if d.startswith("--")), f"<{p.name}>")
            out[flag].setdefault(id(info), []).append(name)
    return out


def test_the_walk_sees_every_command_and_its_flags() -> None:
    found = declarations()
    users = {c for d in found.values() for cs in d.values() for c in cs}
    assert {"repro", "check-config", "report", "matrix", "bisect", "triage", "status", "envs create"} <= users
    assert {"--format", "--debug", "--python", "--model"} <= set(found)


def test_no_flag_is_declared_twice() -> None:
    twice = {flag: len(d) for flag, d in declarations().items() if len(d) > 1}
    assert twice == NOT_YET, {f: declarations()[f] for f in set(twice) ^ set(NOT_YET) or twice}
