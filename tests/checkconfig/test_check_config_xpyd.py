"""check-config on deployments with many servers and real placements (no vLLM needed):
xPyD pairing, per-server host / namespace decisions, typed exposure reasons, derived rules."""

from __future__ import annotations

from tests.checkconfig.test_check_config_rules import (
    D0,
    D0H,
    DENSE,
    HYBRID,
    MULTI,
    P0,
    P0H,
    V_BUGGY,
    V_FIXED,
    ctx,
    ids,
    server,
)
from vllm_pd_doctor.checkconfig import rules
from vllm_pd_doctor.checkconfig.exposure import exposure
from vllm_pd_doctor.checkconfig.rules.topology import Same, same_host
from vllm_pd_doctor.results.checkconfig import (
    ModelProblem,
    ReasonKind,
    Severity,
    SourceFact,
    Verdict,
    VllmSource,
)


def findings(c: rules.Context, rule_id: str) -> list[rules.Finding]:
    return [f for f in rules.run_checks(c) if f.id == rule_id]


# --- xPyD: every prefill x decode pair --------------------------------------------------------


def test_xpyd_pairs_every_prefill_with_every_decode():
    d2 = server(
        D0.replace("=5601", "=5602").replace("8200", "8201") + " --dtype half", "decode", name="decode-2"
    )
    c = ctx(extra=(d2,))
    assert len(list(c.pairs())) == 2
    f = findings(c, "handshake-dtype-mismatch")
    assert len(f) == 1 and f[0].evidence.startswith("prefill -> decode-2: ")


def test_xpyd_two_prefills_collide_with_each_other():
    p2 = server(P0.replace("8100", "8101"), "prefill", name="prefill-2")  # same port 5600
    f = findings(ctx(extra=(p2,)), "side-channel-port-collision")
    assert len(f) == 1 and "prefill" in f[0].evidence and "prefill-2" in f[0].evidence
    assert f[0].severity is Severity.error


def test_xpyd_connector_missing_on_one_decode_only():
    d2 = server("vllm serve M --port 8300", "decode", name="decode-2")
    f = findings(ctx(extra=(d2,)), "connector-missing")
    assert [x.evidence.split(" ")[0] for x in f] == ["decode-2"]


# --- topology -----------------------------------------------------------------------------------

SAME_PORT = D0.replace("=5601", "=5600")


def test_different_pods_never_collide():
    p = server(P0, "prefill", network="pod:vllm-prefill")
    d = server(SAME_PORT, "decode", network="pod:vllm-decode")
    c = rules.Context(servers=(p, d), model=DENSE, vllm=V_FIXED, nixl=None)
    assert same_host(p, d)[0] is Same.no
    assert "side-channel-port-collision" not in ids(c)


def test_same_pod_collides_and_says_why():
    p = server(P0, "prefill", network="pod:vllm")
    d = server(SAME_PORT, "decode", network="pod:vllm")
    f = findings(
        rules.Context(servers=(p, d), model=DENSE, vllm=V_FIXED, nixl=None), "side-channel-port-collision"
    )
    assert f and "test pod:vllm" in f[0].evidence


def test_side_channel_hosts_decide_the_host():
    p = server("VLLM_NIXL_SIDE_CHANNEL_HOST=10.0.0.1 " + P0, "prefill")
    d = server("VLLM_NIXL_SIDE_CHANNEL_HOST=10.0.0.2 " + SAME_PORT, "decode")
    assert same_host(p, d) == (
        Same.no,
        "prefill: VLLM_NIXL_SIDE_CHANNEL_HOST=10.0.0.1; decode: VLLM_NIXL_SIDE_CHANNEL_HOST=10.0.0.2",
    )
    c = rules.Context(servers=(p, d), model=DENSE, vllm=V_FIXED, nixl=None)
    assert "side-channel-port-collision" not in ids(c)
    assert "side-channel-host-loopback" not in ids(c)


def test_pod_ip_from_field_ref_is_unknown_not_loopback():
    p = server("VLLM_NIXL_SIDE_CHANNEL_HOST='$(POD_IP)' " + P0, "prefill", network="pod:vllm-prefill")
    d = server("VLLM_NIXL_SIDE_CHANNEL_HOST='$(POD_IP)' " + D0, "decode", network="pod:vllm-decode")
    c = rules.Context(servers=(p, d), model=DENSE, vllm=V_FIXED, nixl=None)
    assert "side-channel-host-loopback" not in ids(c)
    q = server("VLLM_NIXL_SIDE_CHANNEL_HOST='$(POD_IP)' " + P0, "prefill")
    e = server("VLLM_NIXL_SIDE_CHANNEL_HOST='$(POD_IP)' " + SAME_PORT, "decode")
    same, why = same_host(q, e)
    assert same is Same.unknown and "only known at run time" in why
    f = findings(
        rules.Context(servers=(q, e), model=DENSE, vllm=V_FIXED, nixl=None), "side-channel-port-collision"
    )
    assert f and all(x.severity is Severity.warning for x in f)


def test_loopback_side_channel_across_pods():
    p = server(P0, "prefill", network="host:node-a")
    d = server("VLLM_NIXL_SIDE_CHANNEL_HOST=10.0.0.2 " + D0, "decode", network="host:node-b")
    f = findings(
        rules.Context(servers=(p, d), model=DENSE, vllm=V_FIXED, nixl=None), "side-channel-host-loopback"
    )
    assert [x.evidence.split(" ")[0] for x in f] == ["prefill"]
    assert "(default)" in f[0].evidence


# --- exposure: typed reasons ------------------------------------------------------------------


def test_reasons_are_typed():
    e = exposure(ctx(P0H, D0H, model=HYBRID, vllm=V_BUGGY))
    pre = e.sides[0]
    assert pre.verdict is Verdict.exposed and e.verdict == "exposed"
    assert [r.kind for r in pre.why] == [
        ReasonKind.producer,
        ReasonKind.hybrid,
        ReasonKind.prefix_caching,
        ReasonKind.late_truncation,
    ]
    assert e.sides[1].why[0].kind is ReasonKind.not_producer
    assert pre.reasons[0] == "kv_role kv_producer can produce KV"


def test_unresolved_model_gives_the_resolvers_fix():
    mp = ModelProblem(
        "ibm-granite/granite-4.0-h-tiny",
        "not in the local Hugging Face cache",
        "run `huggingface-cli download ibm-granite/granite-4.0-h-tiny config.json` or pass --model DIR",
    )
    c = ctx(P0H, D0H, model=None, vllm=V_BUGGY, problem=mp)
    assert c.exposure is not None and c.exposure.verdict is Verdict.unknown
    kinds = [r.kind for r in c.exposure.sides[0].why]
    assert ReasonKind.unknown_model in kinds
    (f,) = findings(c, "n1-truncation-unknown")
    assert f.severity is Severity.warning
    assert "huggingface-cli download ibm-granite/granite-4.0-h-tiny" in f.fix
    assert "--model DIR" in f.fix


def test_multiconnector_children_judged_by_their_own_role():
    consumer_child = MULTI.replace('"kv_producer"}', '"kv_consumer"}', 1)
    e = exposure(ctx(consumer_child, None, model=HYBRID, vllm=V_BUGGY))
    nixl = next(s for s in e.sides if s.connector == "nixl")
    assert nixl.verdict is Verdict.not_exposed
    assert nixl.why[0].kind is ReasonKind.not_producer and "child" in nixl.why[0].text


# --- rules derived from the installed vLLM -----------------------------------------------------

HETERO = SourceFact(True, "vllm/x/nixl/base_worker.py:1343", "_build_mamba_remote() takes tp_ratio")
REFUSED = SourceFact(False, "vllm/x/nixl/worker.py:10", "Heterogeneous TP is not supported for Mamba")


def test_hybrid_tp_mismatch_follows_the_installed_worker():
    p, d = P0H + " -tp 1 --no-async-scheduling", D0H + " -tp 2 --no-async-scheduling"
    ok = VllmSource(python="py", version="0.28.0", path="/v", mamba_hetero_tp=HETERO)
    assert "tp-mismatch" not in ids(ctx(p, d, model=HYBRID, vllm=ok))
    no = VllmSource(python="py", version="0.2x", path="/v", mamba_hetero_tp=REFUSED)
    (f,) = findings(ctx(p, d, model=HYBRID, vllm=no), "tp-mismatch")
    assert f.severity is Severity.error and "worker.py:10" in f.evidence
    (f,) = findings(ctx(p, d, model=HYBRID, vllm=V_FIXED), "tp-mismatch")
    assert f.severity is Severity.warning  # not read: cannot say


def test_false_strings_read_as_vllm_reads_them():
    # kv_connector_extra_config values are raw: "False" is a non-empty string, so still on
    s = P0 + " --kv-transfer-config.kv_connector_extra_config.enforce_handshake_compat '\"False\"'"
    assert "handshake-compat-disabled" not in ids(ctx(s))
    # enable_permute_local_kv is a pydantic bool field: "False" is coerced to False
    nhd = "VLLM_KV_CACHE_LAYOUT=NHD " + P0.replace('"kv_role"', '"enable_permute_local_kv":"False","kv_role"')
    assert "kv-layout-nhd" in ids(ctx(nhd))


def test_attention_backend_env_ignored_where_vllm_no_longer_reads_it():
    p = "VLLM_ATTENTION_BACKEND=FLASHINFER " + P0
    d = D0 + " --attention-backend FLASH_ATTN"
    new = VllmSource(python="py", version="0.28.0", path="/v", attention_backend_env=False)
    assert "handshake-attention-backend-mismatch" in ids(ctx(p, d))
    assert [f.evidence for f in findings(ctx(p, d, vllm=new), "handshake-attention-backend-mismatch")] == [
        "attention backend: prefill auto, decode FLASH_ATTN"
    ]


# --- core: any number of servers from the parser, --set passed through ------------------------


def _launch(cmd: str, role: str, name: str, network: str | None = None):
    from vllm_pd_doctor.deployment import parse
    from vllm_pd_doctor.results.launch import LaunchCommand

    args, env = parse.split_command(cmd, name)
    return LaunchCommand(
        role=role,
        args=tuple(args),
        env=tuple(env.items()),
        name=name,
        role_source="kv_role",
        network=network,
        network_evidence=f"Pod {name}" if network else "",
    )


def test_core_checks_a_list_of_servers_and_passes_variables(monkeypatch, tmp_path):
    import sys

    from vllm_pd_doctor.checkconfig import core
    from vllm_pd_doctor.deployment import parse

    seen: dict[str, object] = {}

    def load(path, *, variables=None, others=None):  # the parser's coming signature: a list of servers
        seen["variables"] = variables
        return [
            _launch(P0, "prefill", "prefill-0", "pod:p0"),
            _launch(P0, "prefill", "prefill-1", "pod:p1"),
            _launch(SAME := D0.replace("=5601", "=5600"), "decode", "decode-0", "pod:d0"),
            _launch(SAME + " --block-size 32", "decode", "decode-1", "pod:d1"),
        ]

    monkeypatch.setattr(parse, "load_config_file", load)
    r = core.check(
        config=tmp_path / "x.yaml", python=sys.executable, import_nixl=False, variables={"TP": "2"}
    )
    assert seen["variables"] == {"TP": "2"}
    assert [s.name for s in r.servers] == ["prefill-0", "prefill-1", "decode-0", "decode-1"]
    ids_ = [f.id for f in r.findings]
    assert "side-channel-port-collision" not in ids_  # four pods
    bs = [f.evidence for f in r.findings if f.id == "block-size-mismatch"]
    assert sorted(e.split(":")[0] for e in bs) == ["prefill-0 -> decode-1", "prefill-1 -> decode-1"]
    assert r.inputs.variables == (("TP", "2"),)
    assert len(r.exposure.sides) == 4


def test_hybrid_block_size_mismatch_follows_the_installed_worker():
    blocks = SourceFact(
        True,
        "vllm/x/nixl/base_worker.py:1742",
        "Prefix caching with "
        "heterogeneous physical_blocks_per_logical is not supported for Mamba "
        "hybrid models.",
    )
    v = VllmSource(python="py", version="0.28.0", path="/v", mamba_hetero_block=blocks)
    p, d = P0H + " --block-size 16", D0H + " --block-size 32"
    (f,) = findings(ctx(p, d, model=HYBRID, vllm=v), "block-size-mismatch")
    assert f.severity is Severity.warning and "base_worker.py:1742" in f.evidence
    off = " --no-enable-prefix-caching"
    assert "block-size-mismatch" not in ids(ctx(p + off, d + off, model=HYBRID, vllm=v))
    (f,) = findings(
        ctx(P0H + " --block-size 32", D0H + " --block-size 16", model=HYBRID, vllm=v), "block-size-mismatch"
    )
    assert f.severity is Severity.error  # P > D: not divisible


def test_empty_side_channel_host_is_unknown_not_loopback():
    p = server("VLLM_NIXL_SIDE_CHANNEL_HOST= " + P0, "prefill", network="pod:a")
    d = server("VLLM_NIXL_SIDE_CHANNEL_HOST= " + D0, "decode", network="pod:b")
    c = rules.Context(servers=(p, d), model=DENSE, vllm=V_FIXED, nixl=None)
    assert "side-channel-host-loopback" not in ids(c)


def test_dynamo_sets_the_side_channel_itself():
    from dataclasses import replace

    p = replace(server(P0, "prefill"), launcher="dynamo.vllm")
    d = replace(server(SAME_PORT, "decode"), launcher="dynamo.vllm")
    c = rules.Context(servers=(p, d), model=DENSE, vllm=V_FIXED, nixl=None)
    assert "side-channel-port-collision" not in ids(c)
    assert "side-channel-port-collision" in ids(
        rules.Context(
            servers=(server(P0, "prefill"), server(SAME_PORT, "decode")), model=DENSE, vllm=V_FIXED, nixl=None
        )
    )


def test_loopback_only_where_the_peer_connects():
    # pull mode: decode's side channel is never dialled, so its loopback host is harmless
    p = server("VLLM_NIXL_SIDE_CHANNEL_HOST=10.0.0.1 " + P0, "prefill", network="host:a")
    d = server("VLLM_NIXL_SIDE_CHANNEL_HOST=localhost " + D0, "decode", network="host:b")
    c = rules.Context(servers=(p, d), model=DENSE, vllm=V_FIXED, nixl=None)
    assert "side-channel-host-loopback" not in ids(c)
    push = D0.replace("NixlConnector", "NixlPushConnector")
    d2 = server("VLLM_NIXL_SIDE_CHANNEL_HOST=localhost " + push, "decode", network="host:b")
    p2 = server(
        "VLLM_NIXL_SIDE_CHANNEL_HOST=10.0.0.1 " + P0.replace("NixlConnector", "NixlPushConnector"),
        "prefill",
        network="host:a",
    )
    c2 = rules.Context(servers=(p2, d2), model=DENSE, vllm=V_FIXED, nixl=None)
    assert [f.evidence.split(" ")[0] for f in findings(c2, "side-channel-host-loopback")] == ["decode"]


def test_wildcard_side_channel_host_is_a_warning():
    p = server("VLLM_NIXL_SIDE_CHANNEL_HOST=0.0.0.0 " + P0, "prefill", network="pod:p")
    d = server(D0, "decode", network="pod:d")
    (f,) = findings(
        rules.Context(servers=(p, d), model=DENSE, vllm=V_FIXED, nixl=None), "side-channel-host-loopback"
    )
    assert f.severity is Severity.warning and "router" in f.evidence
