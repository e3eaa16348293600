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


Triple = tuple[Formatter, Formatter, Formatter]
"""(table, json, markdown) of one result type."""
_ORDER = (OutputFormat.table, OutputFormat.json, OutputFormat.markdown)


def _table(fn: Callable[[Any], Any]) -> Formatter:
    from vllm_pd_doctor.formats import table as t

    return lambda r, o: t.render(fn(r), width=o.width, color=o.color)


def _json(fn: Callable[[Any], Any]) -> Formatter:
    from vllm_pd_doctor.formats import json as j

    return lambda r, o: j.dumps(fn(r))


def _plain(fn: Callable[[Any], str]) -> Formatter:
    return lambda r, o: fn(r)


def _check(fmt: OutputFormat) -> dict[type, Formatter]:
    """check-config's report and rule catalogue: only the one format asked for is imported
    (`check-config --format json` never loads rich, triage or the matrix: start-up time)."""
    from vllm_pd_doctor.checkconfig.types import CheckReport, RuleCatalogue

    if fmt is OutputFormat.json:
        from vllm_pd_doctor.formats import json as j

        return {CheckReport: _json(j.check_obj), RuleCatalogue: _json(j.rules_obj)}
    if fmt is OutputFormat.markdown:
        from vllm_pd_doctor.formats import markdown as md

        return {CheckReport: _plain(md.check_md), RuleCatalogue: _plain(md.rules_md)}
    from vllm_pd_doctor.formats import table as t

    return {CheckReport: _table(t.check_table), RuleCatalogue: _table(t.rules_table)}


@functools.cache
def formatters() -> dict[tuple[type, OutputFormat], Formatter]:
    """Every (result type, format) pd-doctor renders, and the function that does it.

    Each result type (a `model.Result` subclass) has one entry per format;
    `tests/test_formats.py` finds every `Result` subclass in the package and checks it has all.
    """
    from vllm_pd_doctor import hotfix
    from vllm_pd_doctor.envs import EnvListing
    from vllm_pd_doctor.formats import _text as tx
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

    per_type: dict[type, Triple] = {
        # result type: (table, json, markdown)
        ReproReport: (
            lambda r, o: t.repro_text(r, width=o.width, color=o.color),
            lambda r, o: j.dumps(j.repro_to_obj(r, as_list=o.as_list)),
            _plain(md.repro_md),
        ),
        MatrixReport: (_table(t.matrix_table), _json(j.matrix_obj), _plain(md.matrix_md)),
        BisectReport: (_plain(t.bisect_text), _json(j.bisect_obj), _plain(md.bisect_md)),
        EnvListing: (_table(t.envs_table), _json(j.envs_obj), _plain(md.envs_md)),
        EnvChange: (_plain(tx.env_change_text), _json(j.env_change_obj), _plain(md.env_change_md)),
        hotfix.Status: (
            _table(t.hotfix_status_table),
            _json(j.hotfix_status_obj),
            _plain(md.hotfix_status_md),
        ),
        hotfix.Change: (
            _plain(tx.hotfix_change_text),
            _json(j.hotfix_change_obj),
            _plain(md.hotfix_change_md),
        ),
        TriageResult: (_table(t.triage_table), _json(jt.triage_obj), _plain(md.triage_md)),
        FailureCatalogue: (_table(t.catalogue_table), _json(jt.catalogue_obj), _plain(md.catalogue_md)),
        ScenarioReport: (_table(sf.report_table), _json(sf.report_obj), _plain(sf.report_md)),
        ScenarioMatrix: (_table(sf.matrix_table), _json(sf.matrix_obj), _plain(sf.matrix_md)),
        ScenarioCatalogue: (_table(sf.catalogue_table), _json(sf.catalogue_obj), _plain(sf.catalogue_md)),
        ScenarioBisect: (_plain(sf.bisect_text), _json(sf.bisect_obj), _plain(sf.bisect_md)),
        StatusReport: (_table(st.status_table), _json(st.status_obj), _plain(st.status_md)),
    }
    out = {(rt, f): fn for rt, fns in per_type.items() for f, fn in zip(_ORDER, fns, strict=True)}
    for f in _ORDER:
        out.update({(rt, f): fn for rt, fn in _check(f).items()})
    return out


def _lookup(rt: type, fmt: OutputFormat) -> Formatter | None:
    if rt.__module__ == "vllm_pd_doctor.checkconfig.results":
        return _check(fmt).get(rt)
    return formatters().get((rt, fmt))


def emit(
    result: Result, fmt: OutputFormat, *, width: int = 110, color: bool = False, as_list: bool = False
) -> str:
    """`result` as text in `fmt`: the one way a command's result reaches its output."""
    fn = _lookup(type(result), OutputFormat(fmt))
    if fn is None:
        raise TypeError(f"no {OutputFormat(fmt).value} format for {type(result).__name__}")
    from vllm_pd_doctor.sanitize import clean

    # input text (a config, a log line) never carries a control sequence into any format
    return fn(clean(result), Options(width=width, color=color, as_list=as_list))
