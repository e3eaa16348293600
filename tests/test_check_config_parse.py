"""check-config's command and config-file parsers (no vLLM needed), fuzzed with hypothesis."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from vllm_pd_doctor.checkconfig import parse
from vllm_pd_doctor.checkconfig.model_info import load_model
from vllm_pd_doctor.errors import BadInput

FIX = Path(__file__).parent / "fixtures" / "check_config"
KTC = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'


def by_role(cmds):
    out = {}
    for c in cmds:
        out.setdefault(c.role, c)
    return out


def test_env_prefix_and_json_value():
    s = parse.parse_command(
        f"VLLM_NIXL_SIDE_CHANNEL_PORT=5600 UCX_TLS=rc,cuda_ipc vllm serve Qwen/Qwen3-0.6B "
        f"--port 8100 --kv-transfer-config '{KTC}' -tp 2", role="prefill")
    assert s.env == {"VLLM_NIXL_SIDE_CHANNEL_PORT": "5600", "UCX_TLS": "rc,cuda_ipc"}
    assert s.model == "Qwen/Qwen3-0.6B"
    assert s.port == 8100
    assert s.tensor_parallel_size == 2
    assert s.kv_connector == "NixlConnector" and s.kv_role == "kv_producer"
    assert s.enable_prefix_caching is None and s.prefix_caching_on


def test_equals_and_dotted_forms_merge():
    s = parse.parse_command(
        "vllm serve M --kv-transfer-config.kv_connector=NixlConnector "
        "--kv_transfer_config.kv_role kv_consumer "
        "--kv-transfer-config.kv_connector_extra_config.kv_lease_duration 10 --port=9000",
        role="decode")
    assert s.kv_transfer_config == {"kv_connector": "NixlConnector", "kv_role": "kv_consumer",
                                    "kv_connector_extra_config": {"kv_lease_duration": 10}}
    assert s.port == 9000


def test_dotted_merges_into_json():
    s = parse.parse_command(f"vllm serve M --kv-transfer-config '{KTC}' "
                            "--kv-transfer-config.kv_role kv_both", role="prefill")
    assert s.kv_connector == "NixlConnector" and s.kv_role == "kv_both"


def test_api_server_module_and_booleans():
    s = parse.parse_command("python3 -m vllm.entrypoints.openai.api_server --model /m "
                            "--no-enable-prefix-caching --no-async-scheduling --block-size 32",
                            role="prefill")
    assert s.model == "/m" and s.enable_prefix_caching is False and s.async_scheduling is False
    assert s.block_size == 32 and not s.prefix_caching_on


def test_unknown_flags_warn_and_continue():
    s = parse.parse_command("vllm serve M --frobnicate 3 --bogus --port 1", role="prefill")
    assert s.unknown_flags == ("--frobnicate", "--bogus")
    assert s.port == 1 and s.model == "M"


def test_shell_noise_is_cut():
    s = parse.parse_command("nohup env A=1 vllm serve M --port 5 > p.log 2>&1 &", role="prefill")
    assert s.env == {"A": "1"} and s.port == 5 and not s.unknown_flags


@pytest.mark.parametrize(("cmd", "needle"), [
    ("", "empty command"),
    ("   ", "empty command"),
    ("A=1 B=2", "empty command"),
    ("vllm serve M --kv-transfer-config '{\"kv_connector\": }'",
     "line 1 column 18 (position 17): expecting value"),
    ("vllm serve M --kv-transfer-config '[1]'", "expected a JSON object"),
    ("vllm serve M --port abc", "expected an integer"),
    ("vllm bench M", "not a `vllm serve` command"),
    ("ls -l", "not a vLLM server command"),
    ("vllm serve M --kv-transfer-config 'x", "cannot split"),
    ("vllm serve M --port", "needs a value"),
])
def test_bad_commands(cmd, needle):
    with pytest.raises(BadInput) as ei:
        parse.parse_command(cmd, role="prefill")
    assert needle in ei.value.message


def test_malformed_json_names_flag_and_position():
    with pytest.raises(BadInput) as ei:
        parse.parse_command("vllm serve M --kv-transfer-config '{\"a\" 1}'", role="prefill")
    assert ei.value.message.startswith("--kv-transfer-config: malformed JSON at line 1 column 6")
    assert "expecting ':' delimiter" in ei.value.message


def test_text_file_two_commands():
    cmds = by_role(parse.load_config_file(FIX / "docs_nixl_quickstart.txt"))
    assert set(cmds) == {"prefill", "decode"}
    p = parse.parse_launch(cmds["prefill"])
    d = parse.parse_launch(cmds["decode"])
    assert p.port == 8100 and d.port == 8200
    assert p.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5600"
    assert d.env["CUDA_VISIBLE_DEVICES"] == "1"


def test_yaml_and_json_files():
    y = by_role(parse.load_config_file(FIX / "accuracy_test_hybrid.yaml"))
    p = parse.parse_launch(y["prefill"])
    d = parse.parse_launch(y["decode"])
    assert p.env["VLLM_NIXL_SIDE_CHANNEL_PORT"] == "5559" and p.block_size == 16
    assert d.kv_role == "kv_consumer" and d.model and d.model.endswith("granite-hybrid")
    j = by_role(parse.load_config_file(FIX / "mooncake_pd.json"))
    jd = parse.parse_launch(j["decode"])
    assert jd.kv_connector == "MooncakeConnector" and jd.machine == "node-b"
    m = by_role(parse.load_config_file(FIX / "multihost_nixl.yaml"))
    mp = parse.parse_launch(m["prefill"])
    assert mp.machine == "10.0.0.1" and mp.tensor_parallel_size == 4 and mp.env["UCX_TLS"] == "tcp"


def test_text_roles_by_label_and_kv_role(tmp_path):
    f = tmp_path / "cmds.txt"
    f.write_text(f"decode: vllm serve M --kv-transfer-config '{KTC.replace('producer', 'consumer')}'\n"
                 f"vllm serve M --kv-transfer-config '{KTC}'\n")
    cmds = by_role(parse.load_config_file(f))
    assert parse.parse_launch(cmds["prefill"]).kv_role == "kv_producer"
    assert parse.parse_launch(cmds["decode"]).kv_role == "kv_consumer"


@pytest.mark.parametrize(("name", "needle"), [
    ("not_a_config.txt", "no launch command found"),
    ("binary.bin", "binary file"),
    ("broken.yaml", "malformed YAML at line 2"),
    ("nope.yaml", "no such file"),
])
def test_bad_config_files(name, needle):
    with pytest.raises(BadInput) as ei:
        parse.load_config_file(FIX / name)
    assert needle in ei.value.message


def test_bad_json_config(tmp_path):
    f = tmp_path / "c.json"
    f.write_text('{"prefill": ')
    with pytest.raises(BadInput, match="malformed JSON at line 1"):
        parse.load_config_file(f)
    f.write_text('{"other": 1}')
    with pytest.raises(BadInput, match="no prefill: or decode: entry"):
        parse.load_config_file(f)
    f.write_text('{"prefill": {"args": []}}')
    with pytest.raises(BadInput, match="empty command"):
        parse.load_config_file(f)


@pytest.mark.parametrize(("d", "hybrid"), [
    ("granite-hybrid", True), ("nemotron-h", True), ("qwen3-next", True), ("qwen3-dense", False)])
def test_model_hybrid_detection(d, hybrid):
    m = load_model(FIX / "models" / d)
    assert m.hybrid is hybrid, m.hybrid_evidence
    assert load_model(FIX / "models" / d / "config.json").hybrid is hybrid


def test_model_bad_paths(tmp_path):
    with pytest.raises(BadInput, match="no such file"):
        load_model(tmp_path / "missing")
    with pytest.raises(BadInput, match=r"no config\.json"):
        load_model(tmp_path)
    (tmp_path / "config.json").write_text("{")
    with pytest.raises(BadInput, match="malformed JSON"):
        load_model(tmp_path)


# --- fuzzing: no input may produce anything but a ServeConfig or a BadInput -----------------

_tokens = st.sampled_from([
    "vllm", "serve", "M", "--port", "8000", "--kv-transfer-config", KTC, "'", '"', "{", "}",
    "--kv-transfer-config.kv_role", "kv_both", "--no-enable-prefix-caching", "-tp", "2",
    "A=1", "=", "--", "-", "--x=", "--block-size=", "\\", "\n", "&", ">", "python", "-m",
    "vllm.entrypoints.openai.api_server", "--model", "--enable-prefix-caching", "false",
    "--kv-transfer-config.", "--kv-transfer-config..a", "--speculative-config", "[]", "#",
])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_tokens, max_size=14).map(" ".join) | st.text(max_size=80))
def test_fuzz_command_parser(text):
    try:
        s = parse.parse_command(text, role="prefill")
    except BadInput as exc:
        assert exc.message and "\n" not in exc.message
    else:
        assert s.role == "prefill"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(
    st.text(max_size=200),
    st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=20),
                 lambda c: st.lists(c, max_size=4) | st.dictionaries(
                     st.sampled_from(["prefill", "decode", "args", "env", "command", "host",
                                      "model", "roles", "x"]), c, max_size=4),
                 max_leaves=12).map(json.dumps),
    st.lists(_tokens, max_size=12).map(lambda t: "prefill: " + " ".join(t)),
))
def test_fuzz_config_parser(text):
    try:
        cmds = parse.parse_config_text(text, label="--config f")
        for c in cmds:
            parse.parse_launch(c)
    except BadInput as exc:
        assert exc.message
