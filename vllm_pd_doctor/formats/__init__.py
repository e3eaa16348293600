"""Pure functions from result types to text: one module per format, one `emit` for every command.

`table.py` (rich, for people), `json.py` (each document with `schema_version`) and `markdown.py`
(issue comments, bug reports) each hold one function per result type. `FORMATTERS` maps
(result type, format) to them; a command calls `emit(result, fmt)` and prints the string.

A new result type: a function in each format module and three entries below. A new format: a
module with one function per result type, an `OutputFormat` member and its entries.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any


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
    """Every (result type, format) pd-doctor renders, and the function that does it."""
    from vllm_pd_doctor.checkconfig.types import CheckReport, RuleCatalogue
    from vllm_pd_doctor.envs import EnvListing
    from vllm_pd_doctor.formats import json as j
    from vllm_pd_doctor.formats import markdown as md
    from vllm_pd_doctor.formats import table as t
    from vllm_pd_doctor.matrix import BisectReport, MatrixReport
    from vllm_pd_doctor.model import ReproReport
    from vllm_pd_doctor.triage.types import TriageResult

    def table(fn: Callable[[Any], Any]) -> Formatter:
        return lambda r, o: t.render(fn(r), width=o.width, color=o.color)

    def as_json(fn: Callable[[Any], Any]) -> Formatter:
        return lambda r, o: j.dumps(fn(r))

    def text(fn: Callable[[Any], str]) -> Formatter:
        return lambda r, o: fn(r)

    F = OutputFormat
    return {
        (ReproReport, F.table): table(t.repro_table),
        (ReproReport, F.json): lambda r, o: j.dumps(j.repro_to_obj(r, as_list=o.as_list)),
        (ReproReport, F.markdown): text(md.repro_md),
        (CheckReport, F.table): table(t.check_table),
        (CheckReport, F.json): as_json(j.check_obj),
        (CheckReport, F.markdown): text(md.check_md),
        (RuleCatalogue, F.table): table(t.rules_table),
        (RuleCatalogue, F.json): as_json(j.rules_obj),
        (RuleCatalogue, F.markdown): text(md.rules_md),
        (MatrixReport, F.table): table(t.matrix_table),
        (MatrixReport, F.json): as_json(j.matrix_obj),
        (MatrixReport, F.markdown): text(md.matrix_md),
        (BisectReport, F.table): text(t.bisect_text),
        (BisectReport, F.json): as_json(j.bisect_obj),
        (BisectReport, F.markdown): text(md.bisect_md),
        (EnvListing, F.table): table(t.envs_table),
        (EnvListing, F.json): as_json(j.envs_obj),
        (EnvListing, F.markdown): text(md.envs_md),
        (TriageResult, F.table): table(t.triage_table),
        (TriageResult, F.json): as_json(j.triage_obj),
        (TriageResult, F.markdown): text(md.triage_md),
    }


def emit(
    result: object, fmt: OutputFormat, *, width: int = 110, color: bool = False, as_list: bool = False
) -> str:
    """`result` (a ReproReport, CheckReport, RuleCatalogue, MatrixReport, BisectReport or
    EnvListing) as text in `fmt`."""
    fn = formatters().get((type(result), OutputFormat(fmt)))
    if fn is None:
        raise TypeError(f"no {OutputFormat(fmt).value} format for {type(result).__name__}")
    return fn(result, Options(width=width, color=color, as_list=as_list))
