"""check-config round 3 inputs (issue 28 items 1-3): runbooks that write their manifests with
heredocs, entrypoint shims, placeholders, empty template values, vLLM recipes. The real public
setups of each shape are in the corpus (tests/fixtures/check_config/corpus, test_corpus.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from vllm_pd_doctor.deployment import parse
from vllm_pd_doctor.infra.errors import BadInput

KTC_P = '{"kv_connector":"NixlConnector","kv_role":"kv_producer"}'
KTC_D = '{"kv_connector":"NixlConnector","kv_role":"kv_consumer"}'
POD = """apiVersion: v1
kind: Pod
metadata:
  name: {name}
spec:
  containers:
  - name: vllm
    image: vllm/vllm-openai:v0.25.0
    command: [vllm, serve, org/m, --kv-transfer-config, '{ktc}']
"""


def _load(tmp_path: Path, text: str, name: str = "x.md") -> list[tuple[str, str | None]]:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return [(c.role, parse.parse_launch(c).model) for c in parse.load_config_file(p)]


def test_heredoc_written_then_applied_is_read_as_the_file(tmp_path: Path):
    page = (
        "Write it:\n\n```bash\ncat <<'EOF' > pd.yaml\n"
        + POD.format(name="prefill", ktc=KTC_P)
        + "---\n"
        + POD.format(name="decode", ktc=KTC_D)
        + "EOF\n```\n\nThen:\n\n```bash\nkubectl apply -f pd.yaml\n```\n"
    )
    assert _load(tmp_path, page) == [("prefill", "org/m"), ("decode", "org/m")]


def test_manifest_piped_into_kubectl_apply(tmp_path: Path):
    script = (
        "cat <<EOF | kubectl apply -f -\n"
        + POD.format(name="p", ktc=KTC_P)
        + "EOF\nkubectl apply -f - <<EOF\n"
        + POD.format(name="d", ktc=KTC_D)
        + "EOF\n"
    )
    assert _load(tmp_path, script, "deploy.sh") == [("prefill", "org/m"), ("decode", "org/m")]


def test_a_heredoc_key_named_prefill_stays_a_key(tmp_path: Path):
    """`prefill:` inside a heredoc is YAML, not pd-doctor's `prefill: CMD` label."""
    values = "prefill:\n  containers:\n  - name: vllm\n"
    script = f"cat > values.yaml <<EOF\n{values}EOF\nvllm serve org/m --kv-transfer-config '{KTC_P}'\n"
    assert _load(tmp_path, script, "run.sh") == [("prefill", "org/m")]


@pytest.mark.parametrize(
    "command",
    [
        "[vendor_entrypoint.sh, vllm, serve, org/m]",
        "[/usr/bin/tini, --, vllm, serve, org/m]",
        "[/opt/run.sh, python3, -m, vllm.entrypoints.openai.api_server, --model, org/m]",
    ],
)
def test_a_shim_that_execs_its_argv_is_a_launcher(tmp_path: Path, command: str):
    compose = f"services:\n  prefill:\n    image: vendor/img:1\n    command: {command}\n"
    got = parse.load_config_file(_write(tmp_path, "compose.yaml", compose))
    assert [parse.parse_launch(c).model for c in got] == ["org/m"]
    assert got[0].launcher.startswith("compose > ")


def test_a_command_that_only_mentions_vllm_is_no_server():
    with pytest.raises(BadInput):
        parse.parse_command("grep vllm serve", role="prefill")


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text, encoding="utf-8")
    return p


@pytest.mark.parametrize(
    ("command", "placeholder", "where"),
    [
        (
            f"sh -c \"vllm serve --model <model-path> \\\n --kv-transfer-config '{KTC_P}'\"",
            "<model-path>",
            "--model",
        ),
        ("vllm serve {model} --port 8000", "{model}", "the model"),
        ("vllm serve org/m --served-model-name REPLACE_ME", "REPLACE_ME", "--served-model-name"),
        ("vllm serve <path_to_your_model>/Qwen2.5-72B/ --port 1", "<path_to_your_model>", "the model"),
        ("vllm serve org/m --host={{ .Values.host }}", "{{ .Values.host }}", "argument"),
    ],
)
def test_a_placeholder_is_named_never_read(command: str, placeholder: str, where: str):
    with pytest.raises(BadInput) as ei:
        parse.parse_command(command, role="prefill")
    assert f"{placeholder!r} is a placeholder" in ei.value.message
    assert where in ei.value.message
    assert "\n" not in ei.value.message


@pytest.mark.parametrize(
    "command",
    [
        "vllm serve org/m --chat-template '<s>{{ messages }}</s>'",
        """vllm serve org/m --kv-transfer-config '{"kv_connector":"NixlConnector","x":"TODO"}'""",
        "vllm serve org/m --host 0.0.0.0 < /dev/null > out.log",
    ],
)
def test_lookalikes_are_not_placeholders(command: str):
    assert parse.parse_command(command, role="prefill").model == "org/m"


def test_an_empty_template_value_is_named_not_typed():
    """`--port $PORT` with PORT empty: the variable is named (bash would shift `--data-parallel-size`
    into --port's value); an empty value with no name to give is said to be missing."""
    with pytest.raises(BadInput) as ei:
        parse.parse_command("PORT=\nvllm serve org/m --port $PORT --data-parallel-size 2", role="prefill")
    assert (
        "$PORT is not set in the file" in ei.value.message
        and ei.value.hint == "give its value: --set PORT=VALUE"
    )
    with pytest.raises(BadInput) as ei:
        parse.parse_command("vllm serve org/m --port --data-parallel-size 2", role="prefill")
    assert "--port has no value (the next word is the flag --data-parallel-size)" in ei.value.message
    assert "expected an integer" not in ei.value.message
    # an empty variable after a switch is dropped as bash does
    assert parse.parse_command("E=\nvllm serve org/m --enforce-eager $E --port 1", role="prefill").port == 1


def test_set_dashdash_values_never_take_the_model_slot():
    s = parse.parse_command(
        'set -- --tensor-parallel-size "5" --foo-unknown "5"\nvllm serve org/m "$@"', role="prefill"
    )
    assert (s.model, s.tensor_parallel_size) == ("org/m", 5)


def test_recipe_strategy_beside_the_model_recipe(tmp_path: Path):
    (tmp_path / "strategies").mkdir()
    (tmp_path / "models" / "org").mkdir(parents=True)
    (tmp_path / "strategies" / "pd_cluster.yaml").write_text(
        f"prefill:\n  vllm_args: [--port, '8001', --kv-transfer-config, '{KTC_P}']\n"
        f"decode:\n  vllm_args: [--port, '8002', --kv-transfer-config, '{KTC_D}']\n",
        encoding="utf-8",
    )
    recipe = (
        "model:\n  model_id: org/m\n  base_args: [--trust-remote-code]\ncompatible_strategies: [pd_cluster]\n"
    )
    got = parse.load_config_file(_write(tmp_path / "models" / "org", "m.yaml", recipe))
    assert [(c.role, parse.parse_launch(c).port) for c in got] == [("prefill", 8001), ("decode", 8002)]
    (tmp_path / "strategies" / "pd_cluster.yaml").unlink()
    with pytest.raises(BadInput, match=r"strategies/pd_cluster\.yaml"):
        parse.load_config_file(tmp_path / "models" / "org" / "m.yaml")
