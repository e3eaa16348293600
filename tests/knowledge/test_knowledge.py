"""knowledge/: the words that name releases are generated from the facts (and say what they said
when they were written by hand), the registry's derived facts, and the modules that run in the
target interpreter stay stdlib + `packaging`."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from vllm_pd_doctor.infra import targetrun
from vllm_pd_doctor.knowledge.facts import advice, advisories, connectors, fixes
from vllm_pd_doctor.triage.entries import CLASSES


def test_advisory_entries_are_complete_and_published() -> None:
    assert advisories.problems() == []
    assert all(a.reference.startswith("https://") and a.id in a.reference for a in advisories.ADVISORIES)


def test_upgrade_words_come_from_the_facts() -> None:
    assert advice.upgrade("nixl") == (
        "upgrade vLLM to 0.29.0 or later, where nixl truncates in on_new_request, "
        "before the prefix-cache lookup"
    )
    assert advice.upgrade("moriio").startswith("upgrade vLLM to 0.31.0 or later")
    assert advisories.upgrade_advice() == "upgrade vLLM to 0.31.0 or later"
    n1 = next(c for c in CLASSES if c.id == "nixl-p-side-truncation-53514")
    assert n1.fix == (
        "Upgrade vLLM to 0.29.0 or later (PR #53523; Mooncake: PR #53663), or "
        "`pd-doctor hotfix install --python PYTHON`; meanwhile disable prefix caching on the prefill engine."
    )
    assert n1.fix_per_release == (
        (">= 0.29.0", "fixed (truncation moved to on_new_request)"),
        ("0.20.0 - 0.28.x", "upgrade, or pd-doctor hotfix install, or --no-enable-prefix-caching on P"),
    )
    assert (
        n1.known_issue == "vLLM #53514, fixed in 0.29.0 by PR #53523; upgrade, or `pd-doctor hotfix install`."
    )


def test_a_new_advisory_moves_the_upgrade_target() -> None:
    later = (*advisories.ADVISORIES, advisories.cve("CVE-0-1", "x", "0.40.0", False))
    assert advisories.upgrade_advice(later) == "upgrade vLLM to 0.40.0 or later"
    only_inclusive = (advisories.cve("CVE-0-2", "x", "0.35.0", True),)
    assert advisories.safe_release(only_inclusive) is None
    assert advisories.upgrade_advice(only_inclusive) == "upgrade vLLM to a release after 0.35.0"


def test_registry_derived_facts() -> None:
    assert {c.key for c in connectors.late_truncating()} == {"nixl", "nixl-push", "mooncake"}
    assert connectors.late_source_words() == {"nixl", "mooncake"}
    assert connectors.extra_packages() == ("msgpack",)
    assert connectors.launcher_connector("dynamo.vllm", "NIXL") == "NixlConnector"
    assert connectors.launcher_connector("dynamo.vllm", "SomethingElse") == "SomethingElse"
    assert fixes.fixed_in() == "0.29.0" and fixes.fixed_in("unknown") == "0.29.0"


def test_a_new_connector_with_an_extra_package_is_provisioned() -> None:
    c = connectors.register(
        connectors.Connector(
            key="fake-extra",
            label="Fake",
            vllm_names=("FakeExtraConnector",),
            library="fake",
            source_words=("fake_extra",),
            truncating_hooks=(connectors.EARLY_HOOK,),
            fixed_in="0.31.0",
            extra_packages=("fakepkg", "msgpack"),
        )
    )
    try:
        assert connectors.extra_packages() == ("msgpack", "fakepkg")
        assert c.key in connectors.literals() and "FakeExtraConnector" in connectors.literals()
    finally:
        connectors.unregister("fake-extra")


def _imports(path: Path) -> list[tuple[int, str]]:
    """(level, module) of every import in a file (level > 0: relative)."""
    out: list[tuple[int, str]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.extend((0, a.name) for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            out.append((node.level, node.module or ""))
    return out


def test_shipped_knowledge_is_stdlib_and_packaging_only() -> None:
    """What targetrun ships into the vLLM interpreter imports nothing of the tool's package or its
    dependencies (relative imports only among the shipped files)."""
    shipped = {Path(n).stem for n in targetrun.SHIPPED_KNOWLEDGE}
    for name in targetrun.SHIPPED_KNOWLEDGE:
        for level, module in _imports(targetrun.KNOWLEDGE_DIR / name):
            top = module.split(".")[0]
            if level:
                assert top in shipped, f"{name}: relative import of {module!r}, which is not shipped"
            else:
                assert top in sys.stdlib_module_names or top == "packaging", f"{name} imports {module}"


def test_target_sources_put_the_registry_in_place_of_the_shim() -> None:
    src = targetrun.target_sources()
    assert src["connectors.py"] == targetrun.KNOWLEDGE_DIR / "connectors.py"
    assert src["harness.py"] == targetrun.TARGET_DIR / "harness.py"
    from vllm_pd_doctor.invllm import connectors as shim

    assert shim is connectors
