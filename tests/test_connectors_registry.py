"""The connector / release registry: complete entries, and a new entry flows everywhere."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from vllm_pd_doctor import inprocess
from vllm_pd_doctor.target import connectors


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


def test_version_tuple() -> None:
    assert connectors.version_tuple("0.28.0+cpu") == (0, 28, 0)
    assert connectors.version_tuple("0.29") == (0, 29, 0)
    assert connectors.version_tuple("main") is None
    adv = connectors.Advisory("X", "y", "0.29.0", True)
    assert adv.affects((0, 29, 0)) and not adv.affects((0, 29, 1))
