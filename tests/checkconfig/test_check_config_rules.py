"""Every check-config rule: one case that triggers it and one that does not (no vLLM needed)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from vllm_pd_doctor.checkconfig import rules
from vllm_pd_doctor.checkconfig.exposure import exposure
from vllm_pd_doctor.deployment import parse
from vllm_pd_doctor.knowledge.readers import serve_flags
from vllm_pd_doctor.results.checkconfig import (
    ConvLayoutOverride,
    ModelInfo,
    ModelProblem,
    NixlInfo,
    ProbeResult,
    Severity,
    TruncationSite,
    VllmSource,
)
from vllm_pd_doctor.results.launch import Server

KTC_P = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
KTC_D = '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'
P0 = f"VLLM_NIXL_SIDE_CHANNEL_PORT=5600 vllm serve M --port 8100 --kv-transfer-config '{KTC_P}'"
D0 = f"VLLM_NIXL_SIDE_CHANNEL_PORT=5601 vllm serve M --port 8200 --kv-transfer-config '{KTC_D}'"
HYB_ENV = "VLLM_SSM_CONV_STATE_LAYOUT=DS "
P0H, D0H = HYB_ENV + P0, HYB_ENV + D0

HYBRID = ModelInfo(
    path="m/config.json",
    architectures=("GraniteMoeHybridForCausalLM",),
    model_type="granitemoehybrid",
    hybrid=True,
    hybrid_evidence="layer_types",
)
DENSE = ModelInfo(
    path="m/config.json",
    architectures=("Qwen3ForCausalLM",),
    model_type="qwen3",
    hybrid=False,
    hybrid_evidence="none",
)
NIXL_OK = NixlInfo(
    dists=(("nixl", "1.5.1"), ("nixl-cu12", "1.5.1")),
    namespace_found=True,
    import_ok=True,
    ucx_plugin=True,
    plugin_files=("libplugin_UCX.so",),
)
EARLY = (
    TruncationSite(
        "nixl", "_truncate_request_for_prefill", "on_new_request", "S", "vllm/x/nixl/base_scheduler.py", 203
    ),
)
LATE = (
    TruncationSite(
        "nixl",
        "_truncate_mamba_request_for_prefill",
        "get_num_new_matched_tokens",
        "S",
        "vllm/x/nixl/pull_scheduler.py",
        69,
    ),
    TruncationSite(
        "nixl",
        "_truncate_mamba_request_for_prefill",
        "get_num_new_matched_tokens",
        "S",
        "vllm/x/nixl/push_scheduler.py",
        127,
    ),
)
V_KV_FIELDS = VllmSource(
    python="py",
    version="0.28.0",
    path="/v/vllm",
    sites=EARLY,
    kv_transfer_fields=("kv_connector", "kv_role", "kv_buffer_device", "kv_connector_extra_config"),
    kv_transfer_forbids_extra=True,
    kv_transfer_location="vllm/config/kv_transfer.py:23",
)
V_FIXED = VllmSource(python="py", version="0.32.0", path="/v/vllm", sites=EARLY)
V_BUGGY = VllmSource(python="py", version="0.28.0", path="/v/vllm", sites=LATE)
V_CPU_OVERRIDE = VllmSource(
    python="py",
    version="0.28.0",
    path="/v/vllm",
    sites=EARLY,
    cpu_conv_layout_override=ConvLayoutOverride(
        "vllm/platforms/cpu.py", 271, "SD", "torch.cpu._is_amx_tile_supported()"
    ),
)


def server(
    cmd: str, role: str, name: str | None = None, host: str | None = None, network: str | None = None
) -> Server:
    args, env = parse.split_command(cmd, role)
    cfg = parse.parse_args(args, env, role=role, what=role, machine=host)
    return Server(
        name=name or role, config=cfg, network=network, network_evidence=f"test {network}" if network else ""
    )


@dataclass(frozen=True)
class _Imaged(Server):
    """A server with the container image its manifest names (the parser's `image` fact)."""

    image: str | None = None


def imaged(cmd: str, role: str, image: str) -> Server:
    s = server(cmd, role, name=f"{role}-img")
    return _Imaged(name=s.name, config=s.config, image=image)


V_REGISTRY = VllmSource(
    python="py",
    version="0.28.0",
    path="/v/vllm",
    sites=EARLY,
    connectors=("NixlConnector", "NixlPushConnector", "MultiConnector", "OffloadingConnector"),
)
V_EC_0_32 = VllmSource(
    python="py",
    version="0.32.0",
    path=str(Path(__file__).resolve().parents[1] / "fixtures" / "check_config" / "vllm_factories_0.32.0"),
    sites=EARLY,
)
"""vLLM 0.32.0's connector factories (their register_connector calls, tests/fixtures)."""
EC_P = P0 + ' --ec-transfer-config \'{"ec_connector":"EC_NAME","ec_role":"ec_consumer"}\''


def released(cmd: str, role: str, release: str = "0.28.0") -> Server:
    """A server whose flags were read with that release's own parser table."""
    table = serve_flags.for_release(release)
    assert table is not None
    args, env = parse.split_command(cmd, role)
    return Server(name=role, config=parse.parse_args(args, env, role=role, what=role, table=table))


MULTI = (
    'vllm serve M --port 8100 --kv-transfer-config \'{"kv_connector":"MultiConnector",'
    '"kv_role":"kv_producer","kv_connector_extra_config":{"connectors":['
    '{"kv_connector":"NixlConnector","kv_role":"kv_producer"},'
    '{"kv_connector":"OffloadingConnector","kv_role":"kv_both"}]}}\''
)


def ctx(
    p: str | None = P0,
    d: str | None = D0,
    *,
    model: ModelInfo | None = DENSE,
    vllm: VllmSource | None = V_FIXED,
    nixl: NixlInfo | None = NIXL_OK,
    hosts: tuple[str | None, str | None] = (None, None),
    extra: tuple[Server, ...] = (),
    problem: ModelProblem | None = None,
) -> rules.Context:
    servers = [
        server(cmd, role, host=host)
        for role, cmd, host in (("prefill", p, hosts[0]), ("decode", d, hosts[1]))
        if cmd is not None
    ]
    return with_exposure(
        rules.Context(servers=(*servers, *extra), model=model, vllm=vllm, nixl=nixl, model_problem=problem)
    )


def with_exposure(c: rules.Context, probe: ProbeResult | None = None) -> rules.Context:
    return replace(c, exposure=exposure(c, probe))


def ids(c: rules.Context) -> list[str]:
    return [f.id for f in rules.run_checks(c)]


OPEN_UPSTREAM = {"scenario-abort-race", "scenario-d-extra-block"}
"""Exposure every NIXL P/D has on every release pd-doctor's scenario runs hold (open upstream)."""


def test_clean_baselines_have_no_findings():
    assert [i for i in ids(ctx()) if i not in OPEN_UPSTREAM] == []
    assert [i for i in ids(ctx(P0H, D0H, model=HYBRID)) if i not in OPEN_UPSTREAM] == []


# rule id -> (triggering context, clean context)
CASES = {
    "side-channel-port-collision": (
        ctx(P0, D0.replace("=5601", "=5600")),
        ctx(P0, D0.replace("=5601", "=5602")),
    ),
    "side-channel-port-collision/dp-range": (
        ctx(P0 + " --data-parallel-size 2", D0),
        ctx(P0 + " --data-parallel-size 2", D0.replace("=5601", "=5602")),
    ),
    "side-channel-port-collision/other-host": (
        ctx(P0, D0.replace("=5601", "=5600")),
        ctx(P0, D0.replace("=5601", "=5600"), hosts=("a", "b")),
    ),
    "side-channel-host-loopback": (
        ctx(hosts=("10.0.0.1", "10.0.0.2")),
        ctx(
            "VLLM_NIXL_SIDE_CHANNEL_HOST=10.0.0.1 " + P0,
            "VLLM_NIXL_SIDE_CHANNEL_HOST=10.0.0.2 " + D0,
            hosts=("10.0.0.1", "10.0.0.2"),
        ),
    ),
    "kv-role-invalid": (ctx(P0.replace("kv_producer", "kv_consumer")), ctx()),
    "kv-role-invalid/missing": (
        ctx("vllm serve M --kv-transfer-config.kv_connector NixlConnector", D0),
        ctx(),
    ),
    "kv-role-both": (ctx(P0.replace("kv_producer", "kv_both")), ctx()),
    "connector-missing": (ctx(P0, "vllm serve M --port 8200"), ctx()),
    "connector-mismatch": (ctx(P0, D0.replace("NixlConnector", "MooncakeConnector")), ctx()),
    "handshake-model-mismatch": (ctx(P0, D0.replace("serve M", "serve N")), ctx()),
    "handshake-dtype-mismatch": (
        ctx(P0 + " --dtype float16", D0 + " --dtype bfloat16"),
        ctx(P0 + " --dtype half", D0 + " --dtype half"),
    ),
    "handshake-cache-dtype-mismatch": (
        ctx(P0 + " --kv-cache-dtype fp8", D0),
        ctx(P0 + " --kv-cache-dtype fp8", D0 + " --kv-cache-dtype fp8"),
    ),
    "handshake-attention-backend-mismatch": (
        ctx("VLLM_ATTENTION_BACKEND=FLASHINFER " + P0, D0 + " --attention-backend FLASH_ATTN"),
        ctx(P0 + " --attention-backend FLASH_ATTN", D0 + " --attention-backend flash_attn"),
    ),
    "handshake-spec-decode-mismatch": (
        ctx(P0 + ' --speculative-config \'{"method":"mtp","num_speculative_tokens":1}\'', D0),
        ctx(P0 + " --speculative-config.method mtp", D0 + ' --speculative-config \'{"method":"mtp"}\''),
    ),
    "handshake-compat-disabled": (
        ctx(P0 + " --kv-transfer-config.kv_connector_extra_config.enforce_handshake_compat false"),
        ctx(),
    ),
    "block-size-mismatch": (
        ctx(P0 + " --block-size 32", D0 + " --block-size 16"),
        ctx(P0 + " --block-size 16", D0 + " --block-size 16"),
    ),
    "block-size-mismatch/hybrid": (
        ctx(P0H + " --block-size 16", D0H + " --block-size 32", model=HYBRID),
        ctx(P0H + " --block-size 32", D0H + " --block-size 32", model=HYBRID),
    ),
    "tp-mismatch": (ctx(P0 + " -tp 4", D0 + " -tp 2"), ctx(P0 + " -tp 2", D0 + " -tp 2")),
    "tp-mismatch/hybrid": (
        ctx(P0H + " -tp 1 --no-async-scheduling", D0H + " -tp 2 --no-async-scheduling", model=HYBRID),
        ctx(P0 + " -tp 1", D0 + " -tp 2"),
    ),
    "hybrid-pipeline-parallel": (ctx(P0H + " -pp 2", D0H, model=HYBRID), ctx(P0 + " -pp 2", D0)),
    "ssm-conv-state-layout": (ctx(P0, D0H, model=HYBRID), ctx(P0, D0, model=DENSE)),
    "ssm-conv-state-layout/sd": (
        ctx(P0H.replace("=DS", "=SD"), D0H, model=HYBRID),
        ctx(P0H, D0H, model=HYBRID),
    ),
    "cpu-conv-layout-override": (
        ctx("VLLM_CPU_KVCACHE_SPACE=4 " + P0H, D0H, model=HYBRID, vllm=V_CPU_OVERRIDE),
        ctx(P0, D0, model=DENSE, vllm=V_CPU_OVERRIDE),
    ),
    "cpu-conv-layout-override/cuda-launch": (
        ctx("VLLM_CPU_KVCACHE_SPACE=4 " + P0H, D0H, model=HYBRID, vllm=V_CPU_OVERRIDE),
        ctx(
            "CUDA_VISIBLE_DEVICES=0 " + P0H,
            "CUDA_VISIBLE_DEVICES=1 " + D0H,
            model=HYBRID,
            vllm=V_CPU_OVERRIDE,
        ),
    ),
    "image-release-mismatch": (
        ctx(None, None, vllm=V_FIXED, extra=(imaged(P0, "prefill", "vllm/vllm-openai:v0.25.0"),)),
        ctx(None, None, vllm=V_FIXED, extra=(imaged(P0, "prefill", "vllm/vllm-openai:v0.32.0"),)),
    ),
    "no-kv-consumer": (ctx(P0, D0.replace("kv_consumer", "kv_producer")), ctx()),
    "kv-transfer-config-key": (
        ctx(P0.replace('"kv_role"', '"kv_encoder_mode":"x","kv_role"'), D0, vllm=V_KV_FIELDS),
        ctx(P0, D0, vllm=V_KV_FIELDS),
    ),
    "hybrid-async-scheduling": (
        ctx(P0H + " -tp 2", D0H + " -tp 2", model=HYBRID),
        ctx(P0H + " -tp 2 --no-async-scheduling", D0H + " -tp 2 --async-scheduling false", model=HYBRID),
    ),
    "hybrid-kv-cache-manager-disabled": (
        ctx(P0H + " --disable-hybrid-kv-cache-manager", D0H, model=HYBRID),
        ctx(P0 + " --disable-hybrid-kv-cache-manager", D0),
    ),
    "kv-layout-nhd": (
        ctx("VLLM_KV_CACHE_LAYOUT=NHD " + P0),
        ctx(
            "VLLM_KV_CACHE_LAYOUT=NHD " + P0.replace('"kv_role"', '"enable_permute_local_kv":true,"kv_role"')
        ),
    ),
    "nccl-vars-ignored": (ctx("NCCL_IB_HCA=mlx5 " + P0), ctx("UCX_NET_DEVICES=mlx5_0:1 " + P0)),
    "ucx-tcp-only": (ctx("UCX_TLS=tcp " + P0), ctx("UCX_TLS=rc,cuda_ipc,cuda_copy " + P0)),
    "nixl-missing": (ctx(nixl=NixlInfo()), ctx()),
    "nixl-import-failed": (
        ctx(nixl=NixlInfo(dists=(("nixl-cu12", "1.5.1"),), namespace_found=False, ucx_plugin=True)),
        ctx(),
    ),
    "nixl-import-failed/error": (
        ctx(
            nixl=NixlInfo(
                dists=(("nixl", "1.5.1"),),
                namespace_found=True,
                import_ok=False,
                import_error="ImportError: libucs.so",
                ucx_plugin=True,
            )
        ),
        ctx(),
    ),
    "nixl-known-bad-version": (
        ctx(
            nixl=NixlInfo(
                dists=(("nixl-cu12", "1.0.1"),), namespace_found=True, import_ok=True, ucx_plugin=True
            )
        ),
        ctx(),
    ),
    "nixl-ucx-plugin-missing": (
        ctx(
            nixl=NixlInfo(
                dists=(("nixl", "1.5.1"),),
                namespace_found=True,
                import_ok=True,
                ucx_plugin=False,
                plugin_files=("libplugin_POSIX.so",),
            )
        ),
        ctx(),
    ),
    "kv-lease-short": (
        ctx(P0 + " --kv-transfer-config.kv_connector_extra_config.kv_lease_duration 5"),
        ctx(P0 + " --kv-transfer-config.kv_connector_extra_config.kv_lease_duration 60"),
    ),
    "kv-lease-short/abort-timeout": (ctx("VLLM_NIXL_ABORT_REQUEST_TIMEOUT=10 " + P0), ctx()),
    "vllm-advisory": (ctx(vllm=V_BUGGY), ctx()),
    "unknown-flag": (ctx(P0 + " --frobnicate 1"), ctx(P0 + " --enforce-eager")),
    "unknown-flag/a-release-parser-makes-it-an-error-instead": (
        ctx(P0 + " --frobnicate 1"),
        ctx(None, D0, extra=(released(P0 + " --frobnicate 1", "prefill"),)),
    ),
    "flag-not-in-release": (
        ctx(None, D0, extra=(released(P0 + " --frobnicate 1", "prefill"),)),
        ctx(None, D0, extra=(released(P0 + " --enable-chunked-prefil", "prefill"),)),  # an abbreviation
    ),
    "flag-not-in-release/a-launcher-with-its-own-flags-is-only-noted": (
        ctx(None, D0, extra=(released(P0 + " --frobnicate 1", "prefill"),)),
        ctx(
            None,
            D0,
            extra=(replace(released(P0 + " --frobnicate 1", "prefill"), launcher="sh > dynamo.vllm"),),
        ),
    ),
    "ec-connector-unregistered": (
        ctx(EC_P.replace("EC_NAME", "MooncakeECConnector"), D0, vllm=V_EC_0_32),
        ctx(EC_P.replace("EC_NAME", "ECMooncakeConnector"), D0, vllm=V_EC_0_32),
    ),
    "ec-connector-unregistered/module-path-loads-any-name": (
        ctx(EC_P.replace("EC_NAME", "MyEC"), D0, vllm=V_EC_0_32),
        ctx(EC_P.replace('"EC_NAME"', '"MyEC","ec_connector_module_path":"my.ec"'), D0, vllm=V_EC_0_32),
    ),
    "mamba-cache-none": (
        ctx(P0H + " --no-enable-prefix-caching", D0H, model=HYBRID),
        ctx(P0 + " --no-enable-prefix-caching", D0),
    ),
    "n1-truncation": (ctx(P0H, D0H, model=HYBRID, vllm=V_BUGGY), ctx(P0H, D0H, model=HYBRID, vllm=V_FIXED)),
    "n1-truncation-unknown": (
        ctx(P0H, D0H, model=None, vllm=V_BUGGY),
        ctx(P0H, D0H, model=HYBRID, vllm=V_BUGGY),
    ),
    "connector-unregistered": (
        ctx(P0.replace("NixlConnector", "P2pConnector"), D0, vllm=V_REGISTRY),
        ctx(vllm=V_REGISTRY),
    ),
    "connector-unregistered/multi-child": (
        ctx(MULTI.replace("Offloading", "Frob"), D0, vllm=V_REGISTRY),
        ctx(MULTI, D0, vllm=V_REGISTRY),
    ),
    "handshake-attention-backend-mismatch/attention-config": (
        ctx(P0 + " --attention-config.backend FLASHINFER", D0 + " --attention-backend FLASH_ATTN"),
        ctx(P0 + ' --attention-config \'{"backend":"FLASH_ATTN"}\'', D0 + " --attention-backend flash_attn"),
    ),
    "scenario-abort-race": (ctx(), ctx(P0, "vllm serve M --port 8200")),
    "scenario-abort-race/moriio-write-mode": (  # MoRIIO's default WRITE mode waits for remote KV
        ctx(P0.replace("Nixl", "MoRIIO"), D0.replace("Nixl", "MoRIIO")),
        ctx(P0, "vllm serve M --port 8200"),
    ),
    "scenario-hybrid-load-failure": (
        ctx(P0H, D0H, model=HYBRID, vllm=V_BUGGY),
        ctx(P0H, D0H, model=HYBRID, vllm=V_FIXED),
    ),
    "scenario-hybrid-load-failure/dense": (
        ctx(P0H, D0H, model=HYBRID, vllm=V_BUGGY),
        ctx(vllm=V_BUGGY),
    ),
    "scenario-lease-reaper": (ctx(vllm=V_BUGGY), ctx(vllm=V_FIXED)),
    "scenario-lease-reaper/consumer-only": (
        ctx(vllm=V_BUGGY),
        ctx("vllm serve M --port 8100", D0, vllm=V_BUGGY),
    ),
    "scenario-d-extra-block": (ctx(), ctx(P0, D0.replace("Nixl", "Mooncake"))),
    "scenario-notify-only-failure": (
        ctx(P0H, D0H, model=HYBRID, vllm=V_BUGGY),
        ctx(P0H, D0H, model=HYBRID, vllm=V_FIXED),
    ),
    "scenario-notify-only-failure/dense": (
        ctx(P0H, D0H, model=HYBRID, vllm=V_BUGGY),
        ctx(vllm=V_BUGGY),
    ),
    "scenario-exposure-unknown": (
        ctx(vllm=VllmSource(python="py", version="0.26.0", path="/v/vllm", sites=EARLY)),
        ctx(),
    ),
    "handshake-compat": (
        ctx(
            None,
            None,
            extra=(
                imaged(P0, "prefill", "vllm/vllm-openai:v0.28.0"),
                imaged(D0, "decode", "vllm/vllm-openai:v0.32.0"),
            ),
        ),
        ctx(
            None,
            None,
            extra=(
                imaged(P0, "prefill", "vllm/vllm-openai:v0.32.0"),
                imaged(D0, "decode", "vllm/vllm-openai:v0.32.0"),
            ),
        ),
    ),
    "handshake-compat/push-pull": (ctx(P0, D0.replace("NixlConnector", "NixlPushConnector")), ctx()),
    "handshake-compat/hma": (
        ctx(P0 + " --disable-hybrid-kv-cache-manager", D0),
        ctx(P0 + " --disable-hybrid-kv-cache-manager", D0 + " --disable-hybrid-kv-cache-manager"),
    ),
    "connector-unregistered/encoder-cache-name": (
        ctx(P0.replace("NixlConnector", "ECExampleConnector"), D0, vllm=V_REGISTRY),
        ctx(
            P0.replace('"NixlConnector"', '"ECExampleConnector","kv_connector_module_path":"my.ec"'),
            D0,
            vllm=V_REGISTRY,
        ),
    ),
    "side-channel-port-collision/relaunched-slot-is-not-two": (
        ctx(P0, P0.replace("--port 8100", "--port 8101").replace("kv_producer", "kv_consumer")),
        ctx(P0, P0.replace("kv_producer", "kv_consumer")),
    ),
    "side-channel-host-loopback/bind-addresses-are-not-hosts": (
        ctx(hosts=("10.0.0.1", "10.0.0.2")),
        ctx(P0 + " --host 10.0.0.1", D0 + " --host 192.168.0.7"),
    ),
    "kv-role-invalid/multi-child": (
        ctx(MULTI.replace('"kv_producer"}', '"kv_consumer"}', 1), D0),
        ctx(MULTI, D0),
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_rule_triggers_and_not(case):
    rule_id = case.split("/")[0]
    trigger, clean = CASES[case]
    assert rule_id in ids(trigger), [f"{f.id}: {f.evidence}" for f in rules.run_checks(trigger)]
    assert rule_id not in ids(clean), [f"{f.id}: {f.evidence}" for f in rules.run_checks(clean)]


def test_every_rule_has_a_case():
    covered = {c.split("/")[0] for c in CASES}
    assert covered == {r.id for r in rules.RULES}
    assert len(rules.RULES) >= 15
    assert len({r.id for r in rules.RULES}) == len(rules.RULES)


def test_severity_depends_on_context():
    f = rules.run_checks(ctx(P0 + " --block-size 16", D0 + " --block-size 32"))
    assert [(x.id, x.severity) for x in f if x.id not in OPEN_UPSTREAM] == [
        ("block-size-mismatch", Severity.warning)
    ]
    f = rules.run_checks(
        ctx(
            P0 + " --dtype half",
            D0 + " --dtype float32 --kv-transfer-config."
            "kv_connector_extra_config.enforce_handshake_compat false",
        )
    )
    assert ("handshake-dtype-mismatch", Severity.warning) in [(x.id, x.severity) for x in f]
    pcp = ctx(P0.replace("kv_producer", "kv_both") + " --prefill-context-parallel-size 2")
    assert [x.severity for x in rules.run_checks(pcp) if x.id == "kv-role-both"] == [Severity.error]


# --- exposure to #53514 ---------------------------------------------------------------------


def verdict(c: rules.Context, probe: ProbeResult | None = None) -> str:
    return exposure(c, probe).verdict


def test_exposure_needs_all_conditions():
    assert verdict(ctx(P0H, D0H, model=HYBRID, vllm=V_BUGGY)) == "exposed"
    assert verdict(ctx(P0H, D0H, model=HYBRID, vllm=V_FIXED)) == "not exposed"
    assert verdict(ctx(P0H, D0H, model=DENSE, vllm=V_BUGGY)) == "not exposed"
    assert verdict(ctx(P0H + " --no-enable-prefix-caching", D0H, model=HYBRID, vllm=V_BUGGY)) == "not exposed"
    assert verdict(ctx(P0H + " --mamba-cache-mode none", D0H, model=HYBRID, vllm=V_BUGGY)) == "not exposed"
    assert verdict(ctx(P0H, D0H, model=None, vllm=V_BUGGY)) == "unknown"
    assert verdict(ctx(P0H, D0H, model=HYBRID, vllm=None)) == "unknown"
    other = P0H.replace("NixlConnector", "LMCacheConnectorV1")
    assert verdict(ctx(other, D0H, model=HYBRID, vllm=V_BUGGY)) == "not exposed"


def test_exposure_push_mode_and_multiconnector():
    push_only_late = VllmSource(python="py", version="x", path="/v", sites=LATE[1:])
    push = P0H.replace("NixlConnector", "NixlPushConnector")
    assert verdict(ctx(push, None, model=HYBRID, vllm=push_only_late)) == "exposed"
    assert verdict(ctx(P0H, None, model=HYBRID, vllm=push_only_late)) == "not exposed"
    multi = (
        'vllm serve M --kv-transfer-config \'{"kv_connector":"MultiConnector",'
        '"kv_role":"kv_producer","kv_connector_extra_config":{"connectors":['
        '{"kv_connector":"NixlConnector","kv_role":"kv_producer"},'
        '{"kv_connector":"OffloadingConnector","kv_role":"kv_producer"}]}}\''
    )
    e = exposure(ctx(multi, None, model=HYBRID, vllm=V_BUGGY))
    assert e.verdict == "exposed"
    assert [s.connector for s in e.sides] == ["nixl", "OffloadingConnector"]


def test_exposure_evidence_and_fixes():
    e = exposure(ctx(P0H, D0H, model=HYBRID, vllm=V_BUGGY))
    pre = e.sides[0]
    assert pre.role == "prefill" and pre.verdict == "exposed"
    assert pre.evidence == (
        "vllm/x/nixl/pull_scheduler.py:69 get_num_new_matched_tokens() -> "
        "_truncate_mamba_request_for_prefill()",
    )
    assert e.sides[1].verdict == "not exposed"  # kv_consumer
    assert any("on_new_request" in f for f in e.fixes)
    assert any("--no-enable-prefix-caching" in f and "trade-off" in f for f in e.fixes)
    assert exposure(ctx(P0H, D0H, model=HYBRID, vllm=V_FIXED)).fixes == ()


def test_probe_result_can_confirm():
    yes = ProbeResult(ran=True, reproduced=True, detail="nixl: REPRODUCED")
    assert verdict(ctx(P0H, D0H, model=None, vllm=V_BUGGY), yes) == "exposed"
    assert verdict(ctx(P0H, D0H, model=DENSE, vllm=V_BUGGY), yes) == "not exposed"


def test_catalogue_entries_complete_and_ids_unique():
    from vllm_pd_doctor.checkconfig.rules.catalog import registered, rule

    for r in rules.RULES:
        assert r.id and r.title and r.fix, r
        assert r.id == r.id.lower() and " " not in r.id
    assert len(registered()) == len(rules.RULES)
    with pytest.raises(ValueError, match="registered twice"):
        rule(id="tp-mismatch", severity=Severity.info, title="t", fix="f")(lambda c: ())


def test_core_never_filters_reasons_by_text():
    import inspect

    from vllm_pd_doctor.checkconfig import core

    src = inspect.getsource(core)
    assert '"unknown" in' not in src and "reasons" not in src


def _sev(c: rules.Context, rule_id: str) -> set[Severity]:
    return {f.severity for f in rules.run_checks(c) if f.id == rule_id}


def test_kv_key_of_another_vllm_is_a_warning_a_typo_an_error():
    """vLLM's own EPD bench script passes `kv_encoder_mode`, a field of the vLLM branch it ships
    with (benchmarks/disagg_benchmarks/disagg_nixl_epd_benchmark.sh): warning. A misspelt field
    (`kv_rol`) fails on every release: error."""
    other = ctx(P0.replace('"kv_role"', '"kv_encoder_mode":"x","kv_role"'), D0, vllm=V_KV_FIELDS)
    typo = ctx(P0.replace('"kv_role"', '"kv_rol":"kv_producer","kv_role"'), D0, vllm=V_KV_FIELDS)
    assert _sev(other, "kv-transfer-config-key") == {Severity.warning}
    assert _sev(typo, "kv-transfer-config-key") == {Severity.error}


def test_handshake_compat_names_every_differing_input_and_softens_when_disabled():
    off = '"kv_connector_extra_config":{"enforce_handshake_compat":false},"kv_role"'
    pair = (
        imaged(P0 + " --dtype bfloat16", "prefill", "vllm/vllm-openai:v0.28.0"),
        imaged(D0.replace("NixlConnector", "NixlPushConnector"), "decode", "vllm/vllm-openai:v0.32.0"),
    )
    found = [f for f in rules.run_checks(ctx(None, None, extra=pair)) if f.id == "handshake-compat"]
    assert len(found) == 1 and found[0].severity is Severity.error
    for said in ("vllm_version: prefill 0.28.0", "decode 0.32.0", "dtype: prefill bfloat16", "transfer_mode"):
        assert said in found[0].evidence, found[0].evidence
    relaxed = (imaged(P0.replace('"kv_role"', off), "prefill", pair[0].image or ""), pair[1])
    assert _sev(ctx(None, None, extra=relaxed), "handshake-compat") == {Severity.warning}
    unknown = (imaged(P0, "prefill", "acme/prefill-img:abc"), imaged(D0, "decode", "acme/decode-img:abc"))
    assert _sev(ctx(None, None, extra=unknown), "handshake-compat") == {Severity.warning}
