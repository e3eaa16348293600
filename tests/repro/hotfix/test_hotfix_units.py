"""pd-doctor hotfix without vLLM: the distribution it writes, the advice, and the decisions the
backport takes on code shapes no installed release has (no guard; a helper it cannot call).

The connector classes below are NOT a mock of vLLM: they are source shapes fed to the same
`plan_class` / `patch_class` that read the installed release, to check that the backport adds a
guard where a release has none and refuses what it cannot call safely. The verdicts against
real releases are in test_hotfix_vllm.py.
"""

from __future__ import annotations

import ast
import sys
from typing import Any

from vllm_pd_doctor.invllm import hotfix
from vllm_pd_doctor.repro import hotfix as core
from vllm_pd_doctor.results.repro import ConnectorVerdict, HotfixPatch


class _Req:
    def __init__(self, n: int, params: dict[str, Any] | None) -> None:
        self.request_id = "r"
        self.prompt_token_ids = list(range(n))
        self.num_prompt_tokens = n
        self.kv_transfer_params = params


class _HalfNoGuard:
    def __init__(self, mamba: bool = True) -> None:
        self._has_mamba = mamba

    def _truncate_mamba_request_for_prefill(self, request: Any) -> None:
        request.prompt_token_ids.pop()
        request.num_prompt_tokens -= 1

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Any:
        params = request.kv_transfer_params
        if params is not None and params.get("do_remote_decode") and self._has_mamba:
            self._truncate_mamba_request_for_prefill(request)
        return 0, False


class _ConnNoGuard:
    def __init__(self, mamba: bool = True) -> None:
        self.connector_scheduler = _HalfNoGuard(mamba)

    def on_new_request(self, request: Any) -> None:
        return None

    def get_num_new_matched_tokens(self, request: Any, n: int) -> Any:
        return self.connector_scheduler.get_num_new_matched_tokens(request, n)


class _HalfOddHelper:
    _has_mamba = True

    def _truncate_mamba_request_for_prefill(self, request: Any, tokens: int) -> None:
        del request.prompt_token_ids[-tokens:]

    def get_num_new_matched_tokens(self, request: Any, num_computed_tokens: int) -> Any:
        params = request.kv_transfer_params
        if params.get("do_remote_decode") and self._has_mamba:
            self._truncate_mamba_request_for_prefill(request, 1)
        return 0, False


class _ConnOdd:
    def __init__(self) -> None:
        self.connector_scheduler = _HalfOddHelper()

    def on_new_request(self, request: Any) -> None:
        return None


def test_no_guard_gets_one_added_and_truncates_once_early() -> None:
    entry = hotfix.plan_class("nixl", "X", _ConnNoGuard)
    assert entry["status"] == "patch", entry
    assert entry["guard_source"] == "added"
    assert entry["condition"] == {"keys": ["do_remote_decode"], "flags": ["_has_mamba"]}
    hotfix.patch_class(entry, _ConnNoGuard)
    assert entry["status"] == "patched"
    again = hotfix.plan_class("nixl", "X", _ConnNoGuard)
    hotfix.patch_class(again, _ConnNoGuard)
    assert again["status"] == "already patched"

    conn = _ConnNoGuard()
    req = _Req(33, {"do_remote_decode": True})
    conn.on_new_request(req)
    assert len(req.prompt_token_ids) == 32 and req.kv_transfer_params["_p_side_truncated"]
    conn.get_num_new_matched_tokens(req, 0)  # the late call is now a no-op
    conn.get_num_new_matched_tokens(req, 0)  # ... also after a preemption
    assert len(req.prompt_token_ids) == 32

    plain = _Req(33, {"do_remote_prefill": True})
    conn.on_new_request(plain)
    assert len(plain.prompt_token_ids) == 33  # not a P-side request
    no_mamba = _ConnNoGuard(mamba=False)
    req2 = _Req(33, {"do_remote_decode": True})
    no_mamba.on_new_request(req2)
    assert len(req2.prompt_token_ids) == 33  # not a hybrid/Mamba model


def test_helper_it_cannot_call_is_refused() -> None:
    entry = hotfix.plan_class("nixl", "Y", _ConnOdd)
    assert entry["status"] == "refused"
    assert "exactly (self, request)" in entry["reason"]
    assert "refused" not in hotfix.summary_line([]).lower()
    assert "REFUSED _ConnOdd" in hotfix.summary_line([{**entry, "class": "_ConnOdd"}])


def test_payload_is_the_target_modules_and_an_entry_point() -> None:
    files = core._payload()
    for name in core.SOURCES:
        assert files[f"pd_doctor_hotfix/{name}"] == core._source(name).read_bytes()
    di = core._dist_info_name()
    assert (
        b"[vllm.general_plugins]\npd_doctor_hotfix = pd_doctor_hotfix.hotfix:register"
        in files[f"{di}/entry_points.txt"]
    )
    siblings = {n.removesuffix(".py") for n in core.SOURCES}
    for name in core.SOURCES:
        imports: set[str] = set()
        for node in ast.walk(ast.parse(files[f"pd_doctor_hotfix/{name}"].decode())):
            if isinstance(node, ast.Import):
                imports.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and not node.level:
                imports.add(str(node.module).split(".")[0])
        extra = {m for m in imports if m not in sys.stdlib_module_names}
        # stdlib + vLLM only (packaging: vllm.config imports it, so it is there wherever vLLM is)
        assert extra <= {"vllm", "packaging"} | siblings, (name, extra)


def test_advice_names_the_exact_commands() -> None:
    text = core.advice("/opt/venv/bin/python")
    for cmd in (
        "pd-doctor repro --python /opt/venv/bin/python --hotfix",
        "pd-doctor hotfix install --python /opt/venv/bin/python",
        "PD_DOCTOR_HOTFIX=53514",
        "pd-doctor hotfix uninstall --python /opt/venv/bin/python",
    ):
        assert cmd in text
    assert "/path/to/vllm-env/bin/python" in core.advice(None)


def test_hotfix_verdict_wording() -> None:
    v = ConnectorVerdict(connector="nixl", label="NIXL", kv_connector="NixlConnector")
    assert v.hotfix_verdict is None
    refused = HotfixPatch(connector="nixl", class_name="C", status="refused", reason="why")
    assert not refused.applied
    assert HotfixPatch(connector="nixl", class_name="C", status="patched", reason="").applied
