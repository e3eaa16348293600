"""Third-party lines (NIXL's C++ agent, the Mooncake store client) that name a catalogue class:
keyed to their statement in the others origin index (`Code(package=...)`) or to a stable error
code, each with the real line it was built on and a lookalike that must not fire the class."""

from __future__ import annotations

import pytest

from vllm_pd_doctor import triage
from vllm_pd_doctor.knowledge import origins
from vllm_pd_doctor.knowledge.origins.index import Origin
from vllm_pd_doctor.triage.catalogue import Code

REGISTER = (
    "E1104 06:35:19.118512 2368741 nixl_agent.cpp:473] "
    "registerMem: registration failed for the specified or all potential backends"
)
"""ai-dynamo/nixl#987 (GPUNetIO backend cannot register VRAM), verbatim."""
DEREGISTER = (
    "E1104 06:35:19.118512 2368741 nixl_agent.cpp:530] "
    "deregisterMem: deregistration failed on at least one backend with status -1"
)
"""Lookalike: the agent's teardown (a sibling statement of registerMem, another function)."""
NO_METADATA = (
    "E0721 08:06:26.781179    4330 nixl_agent.cpp:866] "
    "createXferReq: metadata for remote agent 'def7d2f1-d482-4cd2-b6de-f238da5a9c70' not found"
)
"""ai-dynamo/nixl#1983 (SRD flushed the sends, NIXL dropped the disconnected agent), verbatim."""
NO_BACKENDS = (
    "E0721 08:06:26.781179    4330 nixl_agent.cpp:700] "
    "makeConnection: no backends are found in metadata for remote agent 'def7d2f1-d482'"
)
"""Lookalike: a loaded peer with no common backend (compatibility, not a lost peer)."""
PUT_FAIL = "E0523 06:50:40.085733   223 store_py.cpp:367] Put operation failed with error: TRANSFER_FAIL"
"""kvcache-ai/Mooncake#397 (the store client's put after three failed transfer attempts), verbatim."""
PUT_FULL = "E0523 06:50:40.085733   223 store_py.cpp:367] Put operation failed with error: NO_AVAILABLE_HANDLE"
"""Lookalike: the same statement with the store full (no transfer failed)."""


def _classes(line: str) -> list[str]:
    return [v.cls for v in triage.triage_text(line + "\n").verdicts]


@pytest.mark.parametrize(
    ("line", "cls"),
    [
        (REGISTER, "nixl-memory-registration"),
        (NO_METADATA, "peer-disconnected"),
        (PUT_FAIL, "mooncake-transfer-failed"),
    ],
)
def test_a_third_party_line_names_its_class(line: str, cls: str):
    assert _classes(line)[:1] == [cls]


@pytest.mark.parametrize(
    ("line", "cls"),
    [
        (DEREGISTER, "nixl-memory-registration"),
        (NO_BACKENDS, "peer-disconnected"),
        (PUT_FULL, "mooncake-transfer-failed"),
    ],
)
def test_its_lookalike_does_not(line: str, cls: str):
    assert cls not in _classes(line)


def test_the_nixl_lines_are_keyed_to_libnixl_code():
    """The matchers hit through the located statement, in libnixl's package only."""
    idx = origins.load()
    reg = [o for o in idx.origins if o.package == "libnixl" and o.function == "nixlAgent::registerMem"]
    assert reg
    code = Code("src/core/nixl_agent.cpp", "nixlAgent::registerMem", package="libnixl")
    assert all(code.fits(o) for o in reg)
    other = Origin(**{**reg[0].__dict__, "package": "vllm"})
    assert not code.fits(other)
