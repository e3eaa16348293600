"""Decisions vLLM takes in its own code, as check-config reads them (fast tier: facts given as the
installed source reader returns them; the readers themselves run against 0.28.0 in
test_check_config_vllm_facts.py), and the probe / static verdict reconciliation."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from vllm_pd_doctor.checkconfig import rules
from vllm_pd_doctor.checkconfig.exposure import exposure
from vllm_pd_doctor.checkconfig.rules.device import launch_device
from vllm_pd_doctor.deployment import parse
from vllm_pd_doctor.deployment.parse.loader import launch_from_command
from vllm_pd_doctor.knowledge.models.info import load_model
from vllm_pd_doctor.results.checkconfig import (
    ModelInfo,
    ProbeResult,
    ReasonKind,
    Severity,
    SourceFact,
    TruncationSite,
    Verdict,
    VllmSource,
)
from vllm_pd_doctor.results.launch import Server

MODELS = Path(__file__).resolve().parents[1] / "fixtures" / "check_config" / "models"
KTC_P = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
KTC_D = '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'
DS = "VLLM_SSM_CONV_STATE_LAYOUT=DS "
P = f"vllm serve M --port 8100 --kv-transfer-config '{KTC_P}'"
D = f"vllm serve M --port 8200 --kv-transfer-config '{KTC_D}'"
LATE = (
    TruncationSite(
        "nixl",
        "_truncate_mamba_request_for_prefill",
        "get_num_new_matched_tokens",
        "S",
        "vllm/distributed/kv_transfer/kv_connector/v1/nixl/pull_scheduler.py",
        69,
    ),
)
REWRITE = SourceFact(
    True,
    "vllm/model_executor/models/config.py:604",
    "with prefix caching on, vLLM sets mamba_cache_mode 'align' where it was 'none'",
)
ASSERT_DS = SourceFact(
    True,
    "vllm/distributed/kv_transfer/kv_connector/v1/nixl/base_worker.py:322",
    "3-read Mamba conv transfer requires DS conv state layout. Set VLLM_SSM_CONV_STATE_LAYOUT=DS",
)
V028 = VllmSource(
    python="py",
    version="0.28.0",
    path="/v/vllm",
    sites=LATE,
    mamba_prefix_rewrite=REWRITE,
    conv_layout_assert=ASSERT_DS,
    conv_layout_default="SD",
)
V032_CPU = replace(
    V028,
    version="0.32.0",
    cpu_selects_ds=SourceFact(True, "vllm/platforms/cpu.py:438", "CPU platform selects DS"),
)
HYBRID = load_model(MODELS / "granite-hybrid")


def server(cmd: str, role: str, **kw: object) -> Server:
    launch = launch_from_command(cmd, what=f"--{role}-cmd", role=role)
    return Server(name=role, config=parse.parse_launch(launch), **kw)  # type: ignore[arg-type]


def ctx(
    p: str, d: str | None = None, *, model: ModelInfo | None = HYBRID, vllm: VllmSource | None = V028
) -> rules.Context:
    servers = [server(p, "prefill")] + ([server(d, "decode")] if d else [])
    c = rules.Context(servers=tuple(servers), model=model, vllm=vllm, nixl=None)
    return replace(c, exposure=exposure(c))


# --- vLLM #53706: Kimi-K3 on 0.28.0 --------------------------------------------------------


def test_kimi_k3_on_0_28_is_exposed() -> None:
    c = ctx(DS + P + " --enable-prefix-caching", DS + D, model=load_model(MODELS / "kimi-k3"))
    assert c.exposure is not None and c.exposure.verdict is Verdict.exposed


# --- --enable-prefix-caching --mamba-cache-mode none ------------------------------------------


def test_mamba_none_with_prefix_caching_is_rewritten() -> None:
    c = ctx(DS + P + " --enable-prefix-caching --mamba-cache-mode none", DS + D)
    assert c.exposure is not None and c.exposure.verdict is Verdict.exposed
    why = c.exposure.sides[0].why
    assert any(r.kind is ReasonKind.prefix_caching and REWRITE.location in r.text for r in why)


def test_mamba_none_kept_where_the_source_has_no_rewrite() -> None:
    c = ctx(
        DS + P + " --enable-prefix-caching --mamba-cache-mode none",
        DS + D,
        vllm=replace(V028, mamba_prefix_rewrite=None),
    )
    assert c.exposure is not None and c.exposure.verdict is Verdict.not_exposed


def test_mamba_none_without_source_counts_prefix_caching_on() -> None:
    c = ctx(DS + P + " --enable-prefix-caching --mamba-cache-mode none", DS + D, vllm=None)
    assert c.exposure is not None
    assert any(r.kind is ReasonKind.prefix_caching for r in c.exposure.sides[0].why)


def test_no_enable_prefix_caching_stays_off() -> None:
    c = ctx(DS + P + " --no-enable-prefix-caching", DS + D)
    assert c.exposure is not None and c.exposure.verdict is Verdict.not_exposed


# --- the probe wins; the output never says "not exposed" and "reproduced" at once -------------

VARIANTS = [
    P + " --enable-prefix-caching --mamba-cache-mode none",
    P + " --mamba-cache-mode none",
    P + " --enable-prefix-caching",
    P,
]


@pytest.mark.parametrize("cmd", VARIANTS)
@pytest.mark.parametrize("vllm", [V028, replace(V028, mamba_prefix_rewrite=None), None])
def test_probe_and_verdict_never_contradict(cmd: str, vllm: VllmSource | None) -> None:
    c = ctx(DS + cmd, DS + D, vllm=vllm)
    yes = ProbeResult(ran=True, reproduced=True, detail="nixl: REPRODUCED")
    no = ProbeResult(ran=True, reproduced=False, detail="nixl: not reproduced")
    e_yes, e_no = exposure(c, yes), exposure(c, no)
    deployment_says_no = all(
        {r.kind for r in x.why}
        & {
            ReasonKind.no_prefix_caching,
            ReasonKind.not_producer,
            ReasonKind.no_connector,
            ReasonKind.not_hybrid,
        }
        for x in e_yes.sides
    )
    assert e_yes.verdict is Verdict.exposed or deployment_says_no
    assert e_no.verdict is not Verdict.exposed


# --- rules that depend on the launch's device and the installed source -----------------------


def _sev(c: rules.Context, rule_id: str) -> list[Severity]:
    return [f.severity for f in rules.run_checks(c) if f.id == rule_id]


def test_missing_ds_is_an_error_where_the_worker_asserts_it() -> None:
    assert _sev(ctx(P, D), "ssm-conv-state-layout") == [Severity.error, Severity.error]
    assert _sev(ctx(P, D, vllm=None), "ssm-conv-state-layout") == [Severity.warning, Severity.warning]
    assert _sev(ctx(DS + P, DS + D), "ssm-conv-state-layout") == []


def test_cpu_platform_selecting_ds_is_no_error_on_cpu() -> None:
    cpu = "VLLM_CPU_KVCACHE_SPACE=4 "
    assert _sev(ctx(cpu + P, cpu + D, vllm=V032_CPU), "ssm-conv-state-layout") == [
        Severity.info,
        Severity.info,
    ]
    cuda = "CUDA_VISIBLE_DEVICES=0 "
    assert _sev(ctx(cuda + P, cuda + D, vllm=V032_CPU), "ssm-conv-state-layout") == [
        Severity.error,
        Severity.error,
    ]


@pytest.mark.parametrize(
    ("prefix", "device"),
    [
        ("CUDA_VISIBLE_DEVICES=0,1 ", "cuda"),
        ("VLLM_CPU_OMP_THREADS_BIND=0-3 ", "cpu"),
        ("ZE_AFFINITY_MASK=0 ", "xpu"),
        ("VLLM_TARGET_DEVICE=cpu ", "cpu"),
        ("--device=xpu ", "xpu"),
        ("", None),
    ],
)
def test_launch_device_from_env(prefix: str, device: str | None) -> None:
    cmd = P + " " + prefix if prefix.startswith("--") else prefix + P
    assert launch_device(server(cmd, "prefill"))[0] == device


@pytest.mark.parametrize(
    ("image", "device"),
    [
        ("vllm/vllm-openai:v0.25.0", "cuda"),
        ("ghcr.io/llm-d/llm-d-cuda:v0.8.1", "cuda"),
        ("public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.9.0", "cpu"),
        ("rocm/vllm:latest", "rocm"),
        ("quay.io/example/server:1.0", None),
    ],
)
def test_launch_device_from_image(image: str, device: str | None) -> None:
    s = server(P, "prefill")
    if "image" not in Server.__dataclass_fields__:
        pytest.skip("parsed servers carry no image yet (issue 17, parsing half)")
    assert launch_device(replace(s, image=image))[0] == device  # type: ignore[call-arg]


def test_external_connector_is_not_vllms_class() -> None:
    ext = P.replace('"kv_role"', '"kv_connector_module_path":"my_pkg.conn","kv_role"')
    c = ctx(DS + ext, DS + D)
    assert c.exposure is not None
    pre = c.exposure.sides[0]
    assert pre.verdict is Verdict.unknown
    assert any(r.kind is ReasonKind.external_connector for r in pre.why)


def test_probe_decides_per_connector() -> None:
    """A probe that reproduced on nixl only does not make a side of another connector exposed."""
    c = ctx(DS + P, DS + D)
    mixed = ProbeResult(
        ran=True, reproduced=True, detail="nixl: REPRODUCED", per_connector=(("nixl", False),)
    )
    assert exposure(c, mixed).verdict is not Verdict.exposed
    only = ProbeResult(ran=True, reproduced=True, detail="nixl: REPRODUCED", per_connector=(("nixl", True),))
    assert exposure(c, only).verdict is Verdict.exposed


# vLLM #53706 (https://github.com/vllm-project/vllm/issues/53706), its stated setup: Dynamo + vLLM
# 0.28.0rc2 1P1D, NixlConnector pull mode (kv_producer / kv_consumer), KimiK3ForConditionalGeneration,
# TP=4 per worker, prefix caching on, block_size 64, max_model_len 8192, max_num_batched_tokens 8192.
# (The issue omits the exact commands; these carry exactly those settings.)
K3_FLAGS = (
    "--tensor-parallel-size 4 --enable-prefix-caching --block-size 64 --max-model-len 8192 "
    "--max-num-batched-tokens 8192"
)
K3_P = f"vllm serve K3 {K3_FLAGS} --kv-transfer-config '{KTC_P}'"
K3_D = f"vllm serve K3 {K3_FLAGS} --kv-transfer-config '{KTC_D}'"


def test_issue_53706_setup() -> None:
    """Exposed on 0.28.0 (read from its source); the hybrid model's other needs are named too."""
    k3 = load_model(MODELS / "kimi-k3")
    c = ctx(K3_P, K3_D, model=k3)
    assert c.exposure is not None and c.exposure.verdict is Verdict.exposed
    found = {f.id: f.severity for f in rules.run_checks(c)}
    assert found["n1-truncation"] is Severity.error
    assert found["ssm-conv-state-layout"] is Severity.error  # 0.28.0's NIXL worker asserts DS
    assert "hybrid-async-scheduling" in found  # TP 4 without --no-async-scheduling
    unread = ctx(K3_P, K3_D, model=k3, vllm=None)
    assert unread.exposure is not None and unread.exposure.verdict is Verdict.unknown
