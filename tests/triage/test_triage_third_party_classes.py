"""Third-party lines (NIXL's C++ agent, the Mooncake store client) that name a catalogue class:
keyed to their statement in the others origin index (`Code(package=...)`) or to a stable error
code, each with the real line it was built on and a lookalike that must not fire the class."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_pd_doctor import triage
from vllm_pd_doctor.knowledge import origins
from vllm_pd_doctor.knowledge.origins.index import Origin
from vllm_pd_doctor.triage.catalogue import Code

CORPUS = Path(__file__).parents[1] / "fixtures/triage/corpus"

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
PUT_FULL = (
    "E0523 06:50:40.085733   223 store_py.cpp:367] Put operation failed with error: NO_AVAILABLE_HANDLE"
)
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


SELECT_LANE = (
    "[1765457011.052824] [nvl72119-T17:1222683:0]      ucp_device.c:415  UCX  ERROR "
    "failed to select lane for local device GPU0"
)
"""ai-dynamo/nixl#1110 (UCX_TLS=^cuda_ipc on GB200), verbatim; the thread index quotes it."""
CREATE_HANDLE = (
    "[1765457011.052824] [nvl72119-T17:1222683:0]      ucp_device.c:593  UCX  ERROR failed to create handle"
)
"""Lookalike: the thread entry's own (another statement of ucp_device.c)."""


def test_a_thread_quoting_a_line_is_listed_beside_the_verdict():
    """nixl#1110's paste: its other UCX lines fire a class, and the thread still shows."""
    r = triage.triage_text(CORPUS.joinpath("nixl-1110-gb200-select-lane.log").read_text(encoding="utf-8"))
    assert r.verdicts and r.unknown is None
    assert "https://github.com/ai-dynamo/nixl/issues/1110" in [t.url for t in r.threads]


def test_a_thread_is_not_listed_for_its_lookalike():
    r = triage.triage_text(CREATE_HANDLE + "\n")
    urls = [t.url for t in (*r.threads, *(r.unknown.threads if r.unknown else ()))]
    assert "https://github.com/ai-dynamo/nixl/issues/1110" not in urls


def test_without_a_verdict_the_threads_stay_in_unknown():
    line = "E0421 11:56:59.775353  709103 proxy.go:148] Failed to deserialize data rail endpoints"
    r = triage.triage_text(line + "\n")
    assert not r.verdicts and r.unknown is not None
    assert r.threads == ()


def test_a_template_s_message_form_still_rejects_its_lookalike():
    """The shorter form a template is matched in (from where its quoted line's message starts)
    holds the quoted line's message and not the entry's lookalike, raw or as the reader reads it."""
    from vllm_pd_doctor.knowledge import threads as thread_index
    from vllm_pd_doctor.triage import threads as thread_match
    from vllm_pd_doctor.triage.reader import normalise

    shortened = 0
    for t in thread_index.load():
        for q in t.lines:
            forms = thread_match._message_forms(q.template, q.quoted, q.lookalike)
            shortened += len(forms) > 1
            msg = normalise(q.quoted, "t", 1).msg
            assert len(forms) == 1 or thread_match._match(q.template, q.quoted, msg, q.lookalike), t.url
            for text in (q.lookalike, normalise(q.lookalike, "t", 1).msg):
                assert not thread_match._match(q.template, q.quoted, text, q.lookalike), (t.url, text)
    assert shortened  # the packaged threads hold such templates (nixl#1110's `UCX ERROR ...`)


DEVX = "UCX ERROR mlx5dv_devx_obj_modify(opcode=0x503) failed, syndrome 0x5d668c: Remote I/O error"
"""smg-project/smg#2382 (prefill after its decode peers restarted), verbatim."""
UNREACHABLE = (
    "[1750835683.514002] [TENCENT64:1392 :0]          select.c:649  UCX  ERROR   no active messages "
    "transport to <no debug data>: rc_verbs/mlx5_bond_1:1 - Destination is unreachable"
)
"""openucx/ucx#10738 (a bond device UCX cannot reach over), cut to one transport."""
CONNECT_REFUSED = (
    "[1747386018.123456] [node1:123  :0]        tcp_sockcm_ep.c:42   UCX  ERROR connect(fd=63, "
    "dest_addr=10.0.0.2:45571) failed: Connection refused"
)
"""ai-dynamo/dynamo#288's UCX connect failure (values as the thread quotes them)."""


def test_the_stale_peer_devx_line_is_named_before_the_catch_all():
    assert _classes(DEVX)[:1] == ["stale-ucx-after-peer-restart"]
    assert "ucx-unreachable" not in _classes(DEVX)


@pytest.mark.parametrize("line", [UNREACHABLE, CONNECT_REFUSED])
def test_unreachable_ucx_lines_still_name_ucx_unreachable(line: str):
    assert _classes(line)[:1] == ["ucx-unreachable"]


def test_a_pasted_native_stack_with_nothing_to_place_still_lists_its_threads():
    """sglang#23489's paste: no class, no line the index places; the threads that quote its
    `nixlUcxSharedThread::run()` frame stand alone in the answer."""
    r = triage.triage_text(CORPUS.joinpath("sglang-23489-ucx-thread-segv.log").read_text(encoding="utf-8"))
    assert not r.verdicts and r.unknown is None
    assert "https://github.com/ai-dynamo/nixl/issues/2102" in [t.url for t in r.threads]


@pytest.mark.parametrize(
    ("line", "url"),
    [
        (
            "zmq.error.ZMQError: Address already in use",
            "https://github.com/vllm-project/vllm-ascend/issues/8938",
        ),
        ("Failed to deserialize data rail endpoints", "https://github.com/NVIDIA/TensorRT-LLM/issues/10024"),
        (
            '  File "<unknown>", line 0, in nixlUcxSharedThread::run()',
            "https://github.com/ai-dynamo/nixl/issues/2102",
        ),
    ],
)
def test_the_added_threads_are_found_for_their_lines(line: str, url: str):
    r = triage.triage_text(line + "\n")
    assert url in [t.url for t in (*r.threads, *(r.unknown.threads if r.unknown else ()))]


@pytest.mark.parametrize(
    ("line", "url"),
    [
        (
            "zmq.error.ZMQError: Cannot assign requested address (addr='tcp://10.0.0.5:5600')",
            "https://github.com/vllm-project/vllm-ascend/issues/8938",
        ),
        (
            "Failed to deserialize control rail endpoints with prefix: dest_ctrl_ep",
            "https://github.com/NVIDIA/TensorRT-LLM/issues/10024",
        ),
    ],
)
def test_the_added_threads_are_not_found_for_their_lookalikes(line: str, url: str):
    r = triage.triage_text(line + "\n")
    assert url not in [t.url for t in (*r.threads, *(r.unknown.threads if r.unknown else ()))]


@pytest.mark.parametrize("fmt", ["table", "markdown", "json"])
def test_every_format_shows_the_threads_beside_a_verdict(fmt: str):
    from typer.testing import CliRunner

    from vllm_pd_doctor.cli import app

    log = CORPUS / "nixl-1110-gb200-select-lane.log"
    got = CliRunner().invoke(app, ["triage", str(log), "-f", fmt])
    assert got.exit_code == 1, got.output
    assert "https://github.com/ai-dynamo/nixl/issues/1110" in got.stdout


def test_every_third_party_code_key_fits_the_packaged_index() -> None:
    """A class keyed to a third-party package's code (libnixl, ucx, mooncake) names a statement that
    package's indexed releases hold (vLLM's keys are checked against installed releases, -m vllm)."""
    from vllm_pd_doctor.knowledge import origins
    from vllm_pd_doctor.triage.entries import CLASSES

    ix = origins.load()
    keys = [
        (c.id, m.code)
        for c in CLASSES
        for m in (*c.matchers, *c.excludes)
        if m.code and m.code.package not in (None, "vllm")
    ]
    assert keys
    assert [f"{cid}: {code}" for cid, code in keys if not any(code.fits(o) for o in ix.origins)] == []
