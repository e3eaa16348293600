"""The connector / release registry: complete entries, and a new entry flows everywhere."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from packaging.version import Version

from vllm_pd_doctor.knowledge.facts import advisories, connectors
from vllm_pd_doctor.repro import inprocess


def test_registry_entries_are_complete() -> None:
    assert connectors.problems() == []


def test_incomplete_entry_is_reported() -> None:
    bad = connectors.Connector(
        key="broken",
        label="",
        vllm_names=(),
        library="x",
        source_words=("broken",),
        truncating_hooks=(),
        fixed_in="soon",
    )
    connectors.register(bad)
    try:
        found = connectors.problems()
    finally:
        connectors.unregister("broken")
    assert any("label is empty" in p for p in found)
    assert any("no vLLM connector names" in p for p in found)
    assert any("no truncating hooks" in p for p in found)
    assert any("is not a release" in p for p in found)


@pytest.fixture
def fake_connector() -> Iterator[connectors.Connector]:
    c = connectors.register(
        connectors.Connector(
            key="fakeconn",
            label="Fake",
            vllm_names=("FakePdConnector",),
            library="fakelib",
            source_words=("fakeconn",),
            truncating_hooks=(connectors.LATE_HOOK,),
            fixed_in="9.9.0",
        )
    )
    try:
        yield c
    finally:
        connectors.unregister("fakeconn")


def test_fake_connector_flows_to_repro_choices(fake_connector: connectors.Connector) -> None:
    assert inprocess.parse_connectors("fakeconn") == ("fakeconn",)
    assert connectors.by_vllm_name("FakePdConnector") is fake_connector


def test_release_version() -> None:
    v = connectors.release_version
    assert v("0.28.0+cpu") == Version("0.28.0") and v("0.29") == Version("0.29.0")
    assert v("0.11.1.dev3+g1a2b") == Version("0.11.1")
    assert v("main") is None and v(None) is None
    adv = advisories.Advisory("X", "y", "0.29.0", True)
    assert adv.affects(Version("0.29.0")) and not adv.affects(Version("0.29.1"))


def test_fake_connector_flows_to_matrix_columns(fake_connector: connectors.Connector) -> None:
    from vllm_pd_doctor.repro import matrix
    from vllm_pd_doctor.results.repro import ReproReport, VllmInstall

    empty = ReproReport(
        engine="in-process",
        vllm=VllmInstall(version="0.0.0", path="?", python="?"),
        results=(),
        available_connectors=(),
    )
    keys = [c.connector for c in matrix.cells_of(empty)]
    assert "fakeconn" in keys and keys[: len(keys) - 1] == ["nixl", "nixl-push", "mooncake", "moriio"]


def test_fake_connector_flows_to_check_config_exposure(
    fake_connector: connectors.Connector, tmp_path: Path
) -> None:
    """check-config judges a producer on the fake connector by the registry entry: the side is
    attributed to `fakeconn` (not "does not truncate"), and the fix names its first fixed release."""
    from vllm_pd_doctor.checkconfig import core

    model = Path(__file__).resolve().parents[2] / "assets" / "models" / "tiny-hybrid"
    kv = '\'{"kv_connector":"FakePdConnector","kv_role":"kv_producer"}\''
    kvd = '\'{"kv_connector":"FakePdConnector","kv_role":"kv_consumer"}\''
    rep = core.check(
        prefill_cmd=f"vllm serve {model} --port 8100 --kv-transfer-config {kv}",
        decode_cmd=f"vllm serve {model} --port 8200 --kv-transfer-config {kvd}",
        model=model,
        python=sys.executable,
        import_nixl=False,
    )
    (p_side,) = [s for s in rep.exposure.sides if s.role == "prefill"]
    assert p_side.connector == "fakeconn", p_side
    assert not any("does not truncate" in r for r in p_side.reasons), p_side.reasons
    assert any("9.9.0" in f for f in rep.exposure.fixes), rep.exposure.fixes
