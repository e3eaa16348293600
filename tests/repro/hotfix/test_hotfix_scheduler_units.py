"""The Scheduler hotfixes without vLLM: the decisions their planners take on source shapes, the two
changes they make (on plain classes, not vLLM), the registry, the CLI's refusal and the formats.

The sources below are NOT a mock of vLLM: they are code shapes fed to the same planners that read
the installed releases (the released shapes, a fixed shape, shapes nobody shipped), to check what is
patched, what is "not needed" and what is refused. Verdicts on real releases are in
test_hotfix_scenarios_vllm.py; the recorded answers of real `--hotfix` runs
(tests/fixtures/recorded/scenarios-*-hotfix.json) are replayed through every format here.
"""

from __future__ import annotations

import importlib.util
import json
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from vllm_pd_doctor.formats import OutputFormat, emit
from vllm_pd_doctor.invllm import hotfix, hotfix_abort_race, hotfix_load_failure, hotfix_source
from vllm_pd_doctor.knowledge.facts import hotfixes
from vllm_pd_doctor.knowledge.facts import scenarios as known
from vllm_pd_doctor.repro.scenarios import run as srun
from vllm_pd_doctor.results.hotfix import FixState, Status

RECORDED = Path(__file__).resolve().parents[2] / "fixtures" / "recorded"

XFER_RELEASED = """
class Scheduler:
    def _update_from_kv_xfer_finished(self, kv_connector_output):
        for req_id in kv_connector_output.finished_recving or ():
            assert req_id in self.requests
            req = self.requests[req_id]
            if req.status == "WAITING_FOR_REMOTE_KVS":
                self.finished_recving_kv_req_ids.add(req_id)
            else:
                self._free_blocks(self.requests[req_id])
        for req_id in kv_connector_output.finished_sending or ():
            assert req_id in self.requests
            self._free_blocks(self.requests[req_id])
"""
XFER_SKIPS = XFER_RELEASED.replace(
    "assert req_id in self.requests", "if req_id not in self.requests:\n                continue"
)
XFER_ODD = XFER_RELEASED.replace("assert req_id in self.requests", "req = self.requests.get(req_id)")

INVALID_RELEASED = """
class Scheduler:
    def _update_requests_with_invalid_blocks(self, requests, invalid_block_ids, num_scheduled_tokens,
                                             evict_blocks=True):
        affected, total, evict = set(), 0, set()
        for request in requests:
            (req_block_ids,) = self.kv_cache_manager.get_block_ids(request.request_id)
            computed = request.num_computed_tokens - num_scheduled_tokens.get(request.request_id, 0)
            for block_id in req_block_ids:
                if block_id not in invalid_block_ids:
                    continue
        return affected, total, evict

    def _handle_invalid_blocks(self, invalid_block_ids, num_scheduled_tokens):
        running = self.running
        return self._update_requests_with_invalid_blocks(running, invalid_block_ids, num_scheduled_tokens)
"""
INVALID_GUARDED = INVALID_RELEASED.replace(
    "    def _handle_invalid_blocks(self, invalid_block_ids, num_scheduled_tokens):\n",
    "    def _handle_invalid_blocks(self, invalid_block_ids, num_scheduled_tokens):\n"
    "        if len(self.kv_cache_config.kv_cache_groups) > 1:\n"
    "            raise RuntimeError('use failed_recving')\n",
)
INVALID_EVERY_GROUP = INVALID_RELEASED.replace(
    "(req_block_ids,) = self.kv_cache_manager.get_block_ids(request.request_id)",
    "groups = self.kv_cache_manager.get_block_ids(request.request_id)",
)


def _plan(fix: str, text: str) -> dict[str, Any]:
    (entry,) = [
        e
        for e in (
            hotfix_abort_race.plan(hotfix_source.ClassSource("/x/vllm/v1/core/sched/scheduler.py", text)),
            hotfix_load_failure.plan(hotfix_source.ClassSource("/x/vllm/v1/core/sched/scheduler.py", text)),
        )
        if e["fix"] == fix
    ]
    return entry


def test_abort_race_plan_by_shape():
    e = _plan("abort-race", XFER_RELEASED)
    assert e["status"] == "patch" and e["label"] == "not merged upstream"
    assert e["sites"] == ["vllm/v1/core/sched/scheduler.py:5", "vllm/v1/core/sched/scheduler.py:12"]
    assert e["function"] == "Scheduler._update_from_kv_xfer_finished"
    assert _plan("abort-race", XFER_SKIPS)["status"] == "not needed"
    odd = _plan("abort-race", XFER_ODD)
    assert odd["status"] == "refused" and "unexpected shape" in odd["reason"]
    assert _plan("abort-race", "class Scheduler:\n    pass\n")["status"] == "refused"


def test_hybrid_load_failure_plan_by_shape():
    e = _plan("hybrid-load-failure", INVALID_RELEASED)
    assert e["status"] == "patch" and e["label"] == ""
    assert e["roles"] == {
        "requests": "requests",
        "invalid": "invalid_block_ids",
        "scheduled": "num_scheduled_tokens",
        "evict": "evict_blocks",
    }
    guarded = _plan("hybrid-load-failure", INVALID_GUARDED)
    assert guarded["status"] == "not needed" and "several KV cache groups" in guarded["reason"]
    assert _plan("hybrid-load-failure", INVALID_EVERY_GROUP)["status"] == "not needed"
    odd = INVALID_RELEASED.replace("return affected, total, evict", "return affected")
    assert _plan("hybrid-load-failure", odd)["status"] == "refused"


def _module(tmp_path: Path, text: str) -> Any:
    """A plain module of its own holding `text` (inspect needs a file to read the source from)."""
    path = tmp_path / "shape_scheduler.py"
    path.write_text(textwrap.dedent(text))
    spec = importlib.util.spec_from_file_location("shape_scheduler", path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules["shape_scheduler"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_abort_race_change_skips_an_already_freed_request(tmp_path):
    mod = _module(tmp_path, XFER_RELEASED)

    class Sched(mod.Scheduler):  # type: ignore[name-defined,misc]
        def __init__(self) -> None:
            self.requests = {"r": SimpleNamespace(status="FINISHED_ABORTED")}
            self.freed: list[str] = []

        def _free_blocks(self, req: Any) -> None:
            self.freed.append("r")
            del self.requests["r"]

    both = SimpleNamespace(finished_recving={"r"}, finished_sending={"r"})
    with pytest.raises(AssertionError):
        Sched()._update_from_kv_xfer_finished(both)
    original = mod.Scheduler._update_from_kv_xfer_finished
    mod.Scheduler._update_from_kv_xfer_finished = hotfix_abort_race.recompiled(original, 2)
    s = Sched()
    s._update_from_kv_xfer_finished(both)
    assert s.freed == ["r"] and s.requests == {}  # freed once, the second notice skipped
    new = mod.Scheduler._update_from_kv_xfer_finished
    assert new.__code__.co_firstlineno == original.__code__.co_firstlineno  # vLLM's own lines
    assert new.__code__.co_filename == original.__code__.co_filename
    with pytest.raises(ValueError, match="found 2 asserts"):
        hotfix_abort_race.recompiled(original, 1)


def _sched(groups: list[list[int]], sizes: list[int]) -> Any:
    specs = [SimpleNamespace(kv_cache_spec=SimpleNamespace(block_size=s)) for s in sizes]
    return SimpleNamespace(
        block_size=sizes[0],
        kv_cache_config=SimpleNamespace(kv_cache_groups=specs),
        kv_cache_manager=SimpleNamespace(
            get_block_ids=lambda rid: groups,
            block_pool=SimpleNamespace(null_block=SimpleNamespace(block_id=0)),
        ),
    )


def test_several_groups_recompute_in_full():
    sched = _sched([[1, 2, 3], [0, 0, 7]], [16, 16])
    a = SimpleNamespace(request_id="a", num_computed_tokens=48)
    b = SimpleNamespace(request_id="b", num_computed_tokens=48)
    affected, tokens, evict = hotfix_load_failure.recompute_in_full(sched, [a, b], {7}, {}, True)
    assert affected == {"a", "b"} and a.num_computed_tokens == 0 and tokens == 48
    assert b.num_computed_tokens == 48  # the block is recomputed by `a` (the release's shared rule)
    assert evict == {1, 2, 3, 7}  # every group's blocks, never the null block
    c = SimpleNamespace(request_id="c", num_computed_tokens=48)
    assert hotfix_load_failure.recompute_in_full(sched, [c], {0, 99}, {}, True) == (set(), 0, set())
    assert c.num_computed_tokens == 48  # the null block (and blocks not its own) never count


def test_one_group_runs_the_release_code():
    calls = []

    def release(
        self: Any, requests: Any, invalid_block_ids: Any, num_scheduled_tokens: Any, evict_blocks=True
    ):
        calls.append(evict_blocks)
        return set(), 0, set()

    roles = {"requests": "requests", "invalid": "invalid_block_ids", "scheduled": "num_scheduled_tokens"}
    wrapped = hotfix_load_failure.wrapper(release, {**roles, "evict": "evict_blocks"})
    wrapped(_sched([[1, 2]], [16]), [], {1}, {}, evict_blocks=False)
    assert calls == [False]
    two = _sched([[1, 2], [3]], [16, 32])
    r = SimpleNamespace(request_id="r", num_computed_tokens=32)
    assert wrapped(two, [r], {3}, {}, evict_blocks=False) == ({"r"}, 32, set())
    assert calls == [False] and r.num_computed_tokens == 0


def test_registry_matches_the_scenarios():
    for h in hotfixes.HOTFIXES:
        s = known.get(h.scenario)
        assert s is not None, h
        assert h.merged == s.fixed_upstream, h
        if h.scheduler:
            fixes = {r.ref for r in s.references if r.kind == "fix"}
            assert set(h.upstream) <= fixes, (h, fixes)
    assert hotfixes.get("abort-race").label == "not merged upstream"  # type: ignore[union-attr]
    assert hotfixes.parse(" 53514, Abort-Race,nope,53514") == (("53514", "abort-race"), ("nope",))
    assert hotfix.enabled({hotfix.ENV: "53514"}) and hotfix.enabled({hotfix.ENV: "abort-race,53514"})
    assert not hotfix.enabled({hotfix.ENV: "abort-race"}) and not hotfix.enabled({})


@pytest.mark.parametrize(
    ("args", "words"),
    [
        (("--scenario", "lease-reaper", "--hotfix"), "scenario lease-reaper has no hotfix"),
        (("--scenario", "abort-race,d-extra-block", "--hotfix"), "scenario d-extra-block has no hotfix"),
        (("--scenario", "abort-race", "--engine", "live", "--hotfix"), "live: runs without --hotfix"),
    ],
)
def test_hotfix_refusals_are_one_line(cli, args, words):
    proc = cli("repro", *args)
    assert proc.returncode == 2, proc.stderr
    assert words in proc.stderr and "Traceback" not in proc.stderr
    assert proc.stdout == ""


def _recorded(release: str) -> Any:
    answer = json.loads((RECORDED / f"scenarios-{release}-hotfix.json").read_text())["answer"]
    ids = tuple(s["id"] for s in answer["spec"]["scenarios"])
    return srun.parse_answer(answer, "/py", ids)


@pytest.mark.parametrize("fmt", list(OutputFormat))
def test_recorded_hotfix_runs_in_every_format(fmt):
    old, new = _recorded("0.28.0"), _recorded("0.32.0")
    assert old.hotfix and new.hotfix and not old.failed and not new.failed
    assert {c.hotfix.word for c in old.cells if c.hotfix} == {"applied"}
    assert new.cell("hybrid-load-failure", "nixl").hotfix.word == "not needed"  # type: ignore[union-attr]
    for r in (old, new):
        text = emit(r, fmt, width=220)
        assert "abort-race (not merged upstream)" in text or '"label": "not merged upstream"' in text
        if fmt is OutputFormat.json:
            doc = json.loads(text)
            assert doc["schema_version"] == 1 and doc["hotfix"] is True
            race = [x for x in doc["results"] if x["scenario"] == "abort-race"]
            assert {x["hotfix"]["label"] for x in race} == {"not merged upstream"}
        else:
            assert "hotfix" in text
    assert "not needed: Scheduler._handle_invalid_blocks stops" in emit(new, OutputFormat.markdown, width=220)


@pytest.mark.parametrize("fmt", list(OutputFormat))
def test_status_lists_the_fixes(fmt):
    st = Status(
        python="/py",
        site_packages="/sp",
        installed=None,
        other_plugins=(),
        enabled=False,
        vllm_version="x",
        plan=(),
        fixes=(
            FixState("abort-race", "patch", "asserts", label="not merged upstream", enabled=True),
            FixState("hybrid-load-failure", "not needed", "guarded", enabled=False),
        ),
        available=tuple(h.title for h in hotfixes.HOTFIXES),
    )
    text = emit(st, fmt, width=200)
    assert "abort-race (not merged upstream)" in text and "hybrid-load-failure" in text
    if fmt is OutputFormat.json:
        doc = json.loads(text)
        assert [f["label"] for f in doc["fixes"]] == ["not merged upstream", ""]
        assert doc["fixes"][0]["enabled"] is True and "53514" in doc["available"]
