"""The public-thread index (knowledge/threads): every entry's quoted lines match their own template,
their lookalikes do not, and each entry names its thread."""

from __future__ import annotations

import json
import re

import pytest

from vllm_pd_doctor.knowledge import threads

ENTRIES = threads.load()
_URL = re.compile(r"^https://github\.com/([\w.-]+/[\w.-]+)/(issues|pull|discussions)/(\d+)$")


def test_template_types_and_values() -> None:
    got = threads.match(
        "retrieved by {workers:int} decode worker(s) within {seconds:int} seconds",
        "WARNING x.py:1] ... retrieved by 0 decode worker(s)   within 120 seconds",
    )
    assert got == {"workers": "0", "seconds": "120"}
    assert threads.match("port {port:port} busy", "port http busy") is None
    with pytest.raises(threads.TemplateError):
        threads.compile_template("{a:nosuchtype}")
    with pytest.raises(threads.TemplateError):
        threads.compile_template("{a} and {a}")


@pytest.mark.parametrize("entry", ENTRIES, ids=[e.url.split("github.com/")[-1] for e in ENTRIES])
def test_entry(entry: threads.Thread) -> None:
    m = _URL.match(entry.url)
    assert m, f"{entry.url}: not a GitHub thread address"
    assert m.group(1) == entry.repo and int(m.group(3)) == entry.number
    assert entry.certainty in threads.CERTAINTY
    assert entry.lines, "an entry quotes at least one line"
    assert entry.cause.strip()
    for q in entry.lines:
        assert threads.match(q.template, q.quoted) is not None, (q.template, q.quoted)
        assert threads.match(q.template, q.lookalike) is None, (q.template, q.lookalike)


def test_urls_unique() -> None:
    urls = [e.url for e in ENTRIES]
    assert len(urls) == len(set(urls))


def test_others_file_spans_projects_around_vllm() -> None:
    """others.jsonl holds the threads of the projects around vLLM's P/D (llm-d, Dynamo, NIXL, LMCache,
    Mooncake, vllm-ascend, ...): many, from several repositories, never vllm-project/vllm itself."""
    lines = (threads.DATA / "others.jsonl").read_text(encoding="utf-8").splitlines()
    repos = [json.loads(line)["repo"] for line in lines if line.strip()]
    assert len(repos) >= 80
    assert "vllm-project/vllm" not in repos
    assert len(set(repos)) >= 5


def test_vllm_files_hold_only_vllm_threads() -> None:
    """The `vllm*.jsonl` files hold vllm-project/vllm's own threads (the others are in others.jsonl)."""
    for path in sorted(threads.DATA.glob("vllm*.jsonl")):
        repos = {
            json.loads(raw)["repo"] for raw in path.read_text(encoding="utf-8").splitlines() if raw.strip()
        }
        assert repos == {"vllm-project/vllm"}, path.name


def test_the_index_holds_200_threads() -> None:
    """Issue 32: at least 200 public threads, each read before it was entered."""
    assert len(ENTRIES) >= 200, len(ENTRIES)
