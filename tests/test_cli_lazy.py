"""A run of one command builds the app of that command alone (start-up time: issue 28 item 5);
`cli.COMMANDS` must name exactly what each command module registers."""

from __future__ import annotations

import importlib

import typer

from vllm_pd_doctor import cli


def _names(module: str) -> set[str]:
    app = typer.Typer()
    importlib.import_module(f"vllm_pd_doctor.commands.{module}").register(app)
    return {str(c.name) for c in app.registered_commands} | {str(g.name) for g in app.registered_groups}


def test_commands_map_matches_what_modules_register() -> None:
    by_module: dict[str, set[str]] = {}
    for name, module in cli.COMMANDS.items():
        by_module.setdefault(module, set()).add(name)
    for module, names in by_module.items():
        assert _names(module) == names, module
    full = cli.command()
    assert set(full.commands) == set(cli.COMMANDS)


def test_one_command_app_has_that_command_and_the_same_help() -> None:
    one = cli.command("check-config")
    assert set(one.commands) == {"check-config"}
    full = cli.command()
    ctx_one = one.make_context("pd-doctor", ["check-config", "--help"], resilient_parsing=True)
    ctx_full = full.make_context("pd-doctor", ["check-config", "--help"], resilient_parsing=True)
    p1 = [p.name for p in one.commands["check-config"].params]
    p2 = [p.name for p in full.commands["check-config"].params]
    assert p1 == p2 and ctx_one.info_name == ctx_full.info_name
    assert cli._invoked(["check-config", "--prefill-cmd", "x"]) == "check-config"
    assert cli._invoked(["--version"]) is None and cli._invoked(["nope"]) is None
