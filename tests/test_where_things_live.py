"""docs/contributing.md "Where things live": every row names paths that exist and a registry that is where the
row says; the kinds issue 27 sized (connector, release, advisory, deployment format, failure class, rule)
stay at 2 package files or fewer."""

from __future__ import annotations

import importlib
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "vllm_pd_doctor"

# row -> (module, attribute) pairs that must exist: the registry or entry point the row names.
REGISTRIES: dict[str, tuple[tuple[str, str], ...]] = {
    "a connector": (
        ("vllm_pd_doctor.knowledge.facts.connectors", "register"),
        ("vllm_pd_doctor.knowledge.facts.connectors", "LAUNCHER_CONNECTORS"),
        ("vllm_pd_doctor.knowledge.facts.connectors", "problems"),
    ),
    "a vLLM release": (
        ("vllm_pd_doctor.knowledge.facts.fixes", "fixed_in"),
        ("vllm_pd_doctor.knowledge.facts.fixes", "N1_FIRST_AFFECTED"),
        ("vllm_pd_doctor.knowledge.facts.examples", "LATE"),
    ),
    "a vLLM release (origin index)": (
        ("vllm_pd_doctor.knowledge.origins.build", "SCOPE"),
        ("vllm_pd_doctor.knowledge.facts.origin_scenarios", "scenario_for"),
    ),
    "an advisory": (
        ("vllm_pd_doctor.knowledge.facts.advisories", "ADVISORIES"),
        ("vllm_pd_doctor.knowledge.facts.advisories", "BAD_NIXL"),
    ),
    "a deployment format (check-config input)": (
        ("vllm_pd_doctor.deployment.parse.formats", "FORMATS"),
        ("vllm_pd_doctor.deployment.parse.registry", "DeploymentFormat"),
    ),
    "a P/D failure scenario (`repro --scenario`)": (
        ("vllm_pd_doctor.knowledge.facts.scenarios", "SCENARIOS"),
        ("vllm_pd_doctor.knowledge.facts.scenarios", "exposure_rules"),
    ),
    "a `status` finding": (("vllm_pd_doctor.status.findings", "check"),),
    "a metric status reads": (("vllm_pd_doctor.knowledge.facts.metrics", "USED"),),
    "a P/D failure class (triage)": (
        ("vllm_pd_doctor.triage.entries_engine", "ENGINE_CLASSES"),
        ("vllm_pd_doctor.triage.entries", "CLASSES"),
    ),
    "a result type": (("vllm_pd_doctor.results", "Result"), ("vllm_pd_doctor.formats", "formatters")),
    "a subcommand": (("vllm_pd_doctor.cli", "COMMANDS"),),
    "a check-config rule": (("vllm_pd_doctor.checkconfig.rules.catalog", "rule"),),
    "an output format": (
        ("vllm_pd_doctor.formats", "OutputFormat"),
        ("vllm_pd_doctor.formats", "formatters"),
    ),
    "a module": (),
    "progress": (("vllm_pd_doctor.infra.progress", "phase"),),
    "code that imports vLLM": (
        ("vllm_pd_doctor.infra.targetrun", "run_module"),
        ("vllm_pd_doctor.infra.targetrun", "SHIPPED_KNOWLEDGE"),
    ),
    "advice (upgrade, workaround, hotfix)": (("vllm_pd_doctor.knowledge.facts.advice", "fixes"),),
    "a repro option both engines take": (("vllm_pd_doctor.repro.inprocess", "make_options"),),
    "a command module (`commands/*`)": (("vllm_pd_doctor.cli", "COMMANDS"),),
}
SIZED = (
    "a connector",
    "a vLLM release",
    "an advisory",
    "a P/D failure class (triage)",
    "a check-config rule",
    "a P/D failure scenario (`repro --scenario`)",
)
"""The kinds of change issues 27 and 31 want at 1-2 files plus fixtures."""

PATH = re.compile(r"`([\w.-]+(?:/[\w.-]*)*\.(?:py|toml|yaml)|[\w.-]+(?:/[\w.-]+)*/)`")


def rows() -> dict[str, tuple[str, str]]:
    text = (ROOT / "docs" / "contributing.md").read_text(encoding="utf-8")
    section = text.split("## Where things live", 1)[1].split("\n## ", 1)[0]
    out: dict[str, tuple[str, str]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("to add", "---"):
            out[cells[0]] = (cells[1], cells[2])
    return out


def test_every_row_has_its_check_and_every_check_its_row() -> None:
    assert set(rows()) == set(REGISTRIES)


def test_the_registries_are_where_the_rows_say() -> None:
    for kind, pairs in REGISTRIES.items():
        for module, attr in pairs:
            assert hasattr(importlib.import_module(module), attr), (kind, module, attr)
            where = module.removeprefix("vllm_pd_doctor.").replace(".", "/")
            touch = rows()[kind][0]
            assert any(w in touch for w in (f"{where}.py", f"{where}/", where.rsplit("/", 1)[-1])), (
                kind,
                where,
            )


def test_the_paths_the_rows_name_exist() -> None:
    for kind, (touch, _) in rows().items():
        for path in PATH.findall(touch):
            if "NAME" in path:
                continue
            assert (PACKAGE / path).exists() or (ROOT / path).exists(), (kind, path)


def test_the_sized_kinds_stay_small() -> None:
    for kind, (_, files) in rows().items():
        assert files.isdigit(), (kind, files)
        if kind in SIZED:
            assert int(files) <= 2, (kind, files)


SCENARIO_EXTRAS = ("knowledge/facts/hotfixes.py", "invllm/hotfix", "repro/live/")
"""What a scenario may have beyond its entry and recipe, each optional: a hotfix, a live run."""


def test_a_scenario_is_its_registry_entry_and_its_recipe() -> None:
    """Issue 31 item 3: a new scenario touches its registry entry, its target recipe and its tests
    only. Its id is written nowhere else in the package (generated data and the optional extras
    aside): check-config, status and triage derive their rules from the entry."""
    from vllm_pd_doctor.checkconfig.rules import RULES
    from vllm_pd_doctor.knowledge.facts import scenarios

    assert {r.id for r in RULES if r.id.startswith("scenario-") and r.id != "scenario-exposure-unknown"} == {
        s.rule_id for s in scenarios.exposure_rules()
    }
    ids = [s.id for s in scenarios.SCENARIOS.values() if s.id != scenarios.DEFAULT]
    for path in PACKAGE.rglob("*.py"):
        rel = path.relative_to(PACKAGE).as_posix()
        if rel == "knowledge/facts/scenarios.py" or rel.startswith("invllm/scenarios/"):
            continue
        if any(rel.startswith(x) for x in SCENARIO_EXTRAS):
            continue
        text = path.read_text(encoding="utf-8")
        assert not [i for i in ids if f'"{i}"' in text], rel
