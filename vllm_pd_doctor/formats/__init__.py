"""Pure functions from result types to text: one module per result type, one `emit` for every command.

Each module renders one feature's results in every format: `repro`, `checkconfig`, `triage`,
`matrix` (matrix and bisect), `envs`, `hotfix`, `status`, `scenarios` (each with its table, JSON
and Markdown functions;
`_common` holds what they share, `mermaid` repro's sequence diagrams). They import `results/` and
nothing of a feature. `formatters()` maps (result type, format) to them; a command calls
`show(result, fmt)` (`emit` to stdout); the report embeds a result's JSON document with `to_dict`.

A new result type (a frozen dataclass subclassing `results.Result`, in `results/`): a module here
with a function per format and one line in `formatters()`. A new format: a function per result
type, an `OutputFormat` member and a column in `formatters()`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # `OutputFormat` is light: the command modules declare options with it
    from vllm_pd_doctor.results.base import Result


class OutputFormat(str, Enum):
    """Values of every command's --format option."""

    table = "table"
    json = "json"
    markdown = "markdown"


@dataclass(frozen=True)
class Options:
    """How to render, beyond the format."""

    width: int = 110
    """Table width in columns."""
    color: bool = False
    """Table in colour (a terminal)."""
    as_list: bool = False
    """Repro JSON: a list of verdicts, even of one (the command asked for several connectors)."""


Formatter = Callable[[Any, Options], str]
Documenter = Callable[[Any, Options], Any]
"""A result's JSON document as plain data (dicts, lists, str, numbers, bools, None)."""


@functools.cache
def _per_type() -> dict[type, tuple[Formatter, Documenter, Formatter]]:
    """Every result type pd-doctor renders: (table, JSON document, markdown)."""
    from vllm_pd_doctor.formats import checkconfig, envs, hotfix, matrix, repro, scenarios, status, triage
    from vllm_pd_doctor.formats._common import render
    from vllm_pd_doctor.results import checkconfig as rc
    from vllm_pd_doctor.results import envs as re
    from vllm_pd_doctor.results import hotfix as rh
    from vllm_pd_doctor.results import matrix as rm
    from vllm_pd_doctor.results import repro as rr
    from vllm_pd_doctor.results import scenarios as rsc
    from vllm_pd_doctor.results import status as rs
    from vllm_pd_doctor.results import triage as rt

    def table(fn: Callable[[Any], Any]) -> Formatter:
        return lambda r, o: render(fn(r), width=o.width, color=o.color)

    def doc(fn: Callable[[Any], Any]) -> Documenter:
        return lambda r, o: fn(r)

    def text(fn: Callable[[Any], str]) -> Formatter:
        return lambda r, o: fn(r)

    return {
        rr.ReproReport: (
            lambda r, o: repro.repro_text(r, width=o.width, color=o.color),
            lambda r, o: repro.repro_to_obj(r, as_list=o.as_list),
            text(repro.repro_md),
        ),
        rc.CheckReport: (
            table(checkconfig.check_table),
            doc(checkconfig.check_obj),
            text(checkconfig.check_md),
        ),
        rc.RuleCatalogue: (
            table(checkconfig.rules_table),
            doc(checkconfig.rules_obj),
            text(checkconfig.rules_md),
        ),
        rm.MatrixReport: (table(matrix.matrix_table), doc(matrix.matrix_obj), text(matrix.matrix_md)),
        rm.BisectReport: (text(matrix.bisect_text), doc(matrix.bisect_obj), text(matrix.bisect_md)),
        re.EnvListing: (table(envs.envs_table), doc(envs.envs_obj), text(envs.envs_md)),
        re.EnvChange: (text(envs.env_change_text), doc(envs.env_change_obj), text(envs.env_change_md)),
        rh.Status: (
            table(hotfix.hotfix_status_table),
            doc(hotfix.hotfix_status_obj),
            text(hotfix.hotfix_status_md),
        ),
        rh.Change: (
            text(hotfix.hotfix_change_text),
            doc(hotfix.hotfix_change_obj),
            text(hotfix.hotfix_change_md),
        ),
        rt.TriageResult: (table(triage.triage_table), doc(triage.triage_obj), text(triage.triage_md)),
        rt.FailureCatalogue: (
            table(triage.catalogue_table),
            doc(triage.catalogue_obj),
            text(triage.catalogue_md),
        ),
        rsc.ScenarioReport: (
            table(scenarios.report_table),
            doc(scenarios.report_obj),
            text(scenarios.report_md),
        ),
        rsc.ScenarioMatrix: (
            table(scenarios.matrix_table),
            doc(scenarios.matrix_obj),
            text(scenarios.matrix_md),
        ),
        rsc.ScenarioCatalogue: (
            table(scenarios.catalogue_table),
            doc(scenarios.catalogue_obj),
            text(scenarios.catalogue_md),
        ),
        rsc.ScenarioBisect: (
            text(scenarios.bisect_text),
            doc(scenarios.bisect_obj),
            text(scenarios.bisect_md),
        ),
        rs.StatusReport: (table(status.status_table), doc(status.status_obj), text(status.status_md)),
    }


@functools.cache
def formatters() -> dict[tuple[type, OutputFormat], Formatter]:
    """Every (result type, format) pd-doctor renders, and the function that does it.

    Each result type (a `results.Result` subclass) has one entry per format;
    `tests/test_formats.py` finds every `Result` subclass in the package and checks it has all.
    """
    from vllm_pd_doctor.formats._common import dumps

    def as_json(fn: Documenter) -> Formatter:
        return lambda r, o: dumps(fn(r, o))

    out: dict[tuple[type, OutputFormat], Formatter] = {}
    for rt, (table, document, markdown) in _per_type().items():
        out[rt, OutputFormat.table] = table
        out[rt, OutputFormat.json] = as_json(document)
        out[rt, OutputFormat.markdown] = markdown
    return out


def _plain(value: Any) -> Any:
    """`value` as `json.loads(dumps(value))` would give it back: dict keys as JSON writes them,
    tuples as lists, anything JSON has no type for as its `str` (what `dumps` does)."""
    if isinstance(value, dict):
        return {_key(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, str):  # a str enum member as JSON writes it: its value
        return str.__str__(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    return str(value)


def _key(k: Any) -> str:
    if isinstance(k, bool):
        return "true" if k else "false"
    return "null" if k is None else str(k)


def to_dict(result: Result, *, as_list: bool = False) -> Any:
    """`result`'s JSON document as plain data: what `emit(result, json)` writes, for the report to
    embed (a dict; a list for a repro report with `as_list`)."""
    entry = _per_type().get(type(result))
    if entry is None:
        raise TypeError(f"no json format for {type(result).__name__}")
    from vllm_pd_doctor.sanitize import clean

    return _plain(entry[1](clean(result), Options(as_list=as_list)))


def emit(
    result: Result, fmt: OutputFormat, *, width: int = 110, color: bool = False, as_list: bool = False
) -> str:
    """`result` as text in `fmt`: the one way a command's result reaches its output."""
    fn = formatters().get((type(result), OutputFormat(fmt)))
    if fn is None:
        raise TypeError(f"no {OutputFormat(fmt).value} format for {type(result).__name__}")
    from vllm_pd_doctor.sanitize import clean

    # input text (a config, a log line) never carries a control sequence into any format
    return fn(clean(result), Options(width=width, color=color, as_list=as_list))
