"""Pure functions from result types to text: one module per format, one `emit` for every command.

`table.py` (rich, for people), `json.py` (each document with `schema_version`) and `markdown.py`
(issue comments, bug reports) each hold one function per result type. `formatters()` maps
(result type, format) to them; a command calls `show(result, fmt)` (`emit` to stdout).

A new result type (a frozen dataclass subclassing `model.Result`, e.g. triage's verdicts): a
function in each format module and one line in `formatters()`. A new format: a module with one
function per result type, an `OutputFormat` member and a column in `formatters()`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # `OutputFormat` is light: the command modules declare options with it
    from vllm_pd_doctor.results import Result


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


@functools.cache
def formatters() -> dict[tuple[type, OutputFormat], Formatter]:
    """Every (result type, format) pd-doctor renders, and the function that does it.

    Each result type (a `model.Result` subclass) has one entry per format;
    `tests/test_formats.py` finds every `Result` subclass in the package and checks it has all.
    """
    from vllm_pd_doctor import hotfix
    from vllm_pd_doctor.checkconfig.types import CheckReport, RuleCatalogue
    from vllm_pd_doctor.envs import EnvListing
    from vllm_pd_doctor.formats import _text
    from vllm_pd_doctor.formats import json as j
    from vllm_pd_doctor.formats import json_triage as jt
    from vllm_pd_doctor.formats import markdown as md
    from vllm_pd_doctor.formats import status as st
    from vllm_pd_doctor.formats import table as t
    from vllm_pd_doctor.matrix import BisectReport, MatrixReport
    from vllm_pd_doctor.results import EnvChange, ReproReport
    from vllm_pd_doctor.scenarios import formats as sf
    from vllm_pd_doctor.scenarios.results import (
        ScenarioBisect,
        ScenarioCatalogue,
        ScenarioMatrix,
        ScenarioReport,
    )
    from vllm_pd_doctor.status.types import StatusReport
    from vllm_pd_doctor.triage.types import FailureCatalogue, TriageResult

    def table(fn: Callable[[Any], Any]) -> Formatter:
        return lambda r, o: t.render(fn(r), width=o.width, color=o.color)

    def as_json(fn: Callable[[Any], Any]) -> Formatter:
        return lambda r, o: j.dumps(fn(r))

    def text(fn: Callable[[Any], str]) -> Formatter:
        return lambda r, o: fn(r)

    per_type: dict[type, tuple[Formatter, Formatter, Formatter]] = {
        # result type: (table, json, markdown)
        ReproReport: (
            lambda r, o: t.repro_text(r, width=o.width, color=o.color),
            lambda r, o: j.dumps(j.repro_to_obj(r, as_list=o.as_list)),
            text(md.repro_md),
        ),
        CheckReport: (table(t.check_table), as_json(j.check_obj), text(md.check_md)),
        RuleCatalogue: (table(t.rules_table), as_json(j.rules_obj), text(md.rules_md)),
        MatrixReport: (table(t.matrix_table), as_json(j.matrix_obj), text(md.matrix_md)),
        BisectReport: (text(t.bisect_text), as_json(j.bisect_obj), text(md.bisect_md)),
        EnvListing: (table(t.envs_table), as_json(j.envs_obj), text(md.envs_md)),
        EnvChange: (text(_text.env_change_text), as_json(j.env_change_obj), text(md.env_change_md)),
        hotfix.Status: (
            table(t.hotfix_status_table),
            as_json(j.hotfix_status_obj),
            text(md.hotfix_status_md),
        ),
        hotfix.Change: (
            text(_text.hotfix_change_text),
            as_json(j.hotfix_change_obj),
            text(md.hotfix_change_md),
        ),
        TriageResult: (table(t.triage_table), as_json(jt.triage_obj), text(md.triage_md)),
        FailureCatalogue: (table(t.catalogue_table), as_json(jt.catalogue_obj), text(md.catalogue_md)),
        ScenarioReport: (table(sf.report_table), as_json(sf.report_obj), text(sf.report_md)),
        ScenarioMatrix: (table(sf.matrix_table), as_json(sf.matrix_obj), text(sf.matrix_md)),
        ScenarioCatalogue: (table(sf.catalogue_table), as_json(sf.catalogue_obj), text(sf.catalogue_md)),
        ScenarioBisect: (text(sf.bisect_text), as_json(sf.bisect_obj), text(sf.bisect_md)),
        StatusReport: (table(st.status_table), as_json(st.status_obj), text(st.status_md)),
    }
    order = (OutputFormat.table, OutputFormat.json, OutputFormat.markdown)
    return {(rt, f): fn for rt, fns in per_type.items() for f, fn in zip(order, fns, strict=True)}


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
