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


Entry = tuple[Formatter, Documenter, Formatter]
"""A result type's (table, JSON document, markdown) functions."""


def _table(fn: Callable[[Any], Any]) -> Formatter:
    def render_table(r: Any, o: Options) -> str:
        from vllm_pd_doctor.formats._common import render

        return render(fn(r), width=o.width, color=o.color)

    return render_table


def _doc(fn: Callable[[Any], Any]) -> Documenter:
    return lambda r, o: fn(r)


def _text(fn: Callable[[Any], str]) -> Formatter:
    return lambda r, o: fn(r)


def _repro() -> dict[type, Entry]:
    from vllm_pd_doctor.formats import repro
    from vllm_pd_doctor.results import repro as rr

    return {
        rr.ReproReport: (
            lambda r, o: repro.repro_text(r, width=o.width, color=o.color),
            lambda r, o: repro.repro_to_obj(r, as_list=o.as_list),
            _text(repro.repro_md),
        ),
    }


def _checkconfig() -> dict[type, Entry]:
    from vllm_pd_doctor.formats import checkconfig as f
    from vllm_pd_doctor.results import checkconfig as rc

    return {
        rc.CheckReport: (_table(f.check_table), _doc(f.check_obj), _text(f.check_md)),
        rc.RuleCatalogue: (_table(f.rules_table), _doc(f.rules_obj), _text(f.rules_md)),
    }


def _matrix() -> dict[type, Entry]:
    from vllm_pd_doctor.formats import matrix as f
    from vllm_pd_doctor.results import matrix as rm

    return {
        rm.MatrixReport: (_table(f.matrix_table), _doc(f.matrix_obj), _text(f.matrix_md)),
        rm.BisectReport: (_text(f.bisect_text), _doc(f.bisect_obj), _text(f.bisect_md)),
    }


def _envs() -> dict[type, Entry]:
    from vllm_pd_doctor.formats import envs as f
    from vllm_pd_doctor.results import envs as re

    return {
        re.EnvListing: (_table(f.envs_table), _doc(f.envs_obj), _text(f.envs_md)),
        re.EnvChange: (_text(f.env_change_text), _doc(f.env_change_obj), _text(f.env_change_md)),
    }


def _hotfix() -> dict[type, Entry]:
    from vllm_pd_doctor.formats import hotfix as f
    from vllm_pd_doctor.results import hotfix as rh

    return {
        rh.Status: (_table(f.hotfix_status_table), _doc(f.hotfix_status_obj), _text(f.hotfix_status_md)),
        rh.Change: (_text(f.hotfix_change_text), _doc(f.hotfix_change_obj), _text(f.hotfix_change_md)),
    }


def _triage() -> dict[type, Entry]:
    from vllm_pd_doctor.formats import triage as f
    from vllm_pd_doctor.results import triage as rt

    return {
        rt.TriageResult: (_table(f.triage_table), _doc(f.triage_obj), _text(f.triage_md)),
        rt.FailureCatalogue: (_table(f.catalogue_table), _doc(f.catalogue_obj), _text(f.catalogue_md)),
    }


def _scenarios() -> dict[type, Entry]:
    from vllm_pd_doctor.formats import scenarios as f
    from vllm_pd_doctor.results import scenarios as rsc

    return {
        rsc.ScenarioReport: (_table(f.report_table), _doc(f.report_obj), _text(f.report_md)),
        rsc.ScenarioMatrix: (_table(f.matrix_table), _doc(f.matrix_obj), _text(f.matrix_md)),
        rsc.ScenarioCatalogue: (_table(f.catalogue_table), _doc(f.catalogue_obj), _text(f.catalogue_md)),
        rsc.ScenarioBisect: (_text(f.bisect_text), _doc(f.bisect_obj), _text(f.bisect_md)),
    }


def _status() -> dict[type, Entry]:
    from vllm_pd_doctor.formats import status as f
    from vllm_pd_doctor.results import status as rs

    return {rs.StatusReport: (_table(f.status_table), _doc(f.status_obj), _text(f.status_md))}


_FEATURES: dict[str, Callable[[], dict[type, Entry]]] = {
    "repro": _repro,
    "checkconfig": _checkconfig,
    "matrix": _matrix,
    "envs": _envs,
    "hotfix": _hotfix,
    "triage": _triage,
    "scenarios": _scenarios,
    "status": _status,
}
"""`results/<feature>.py` -> its formats (`formats/<feature>.py`), imported only when one of that
feature's results is rendered: a check-config run never imports the repro or triage formats."""


@functools.cache
def _feature(name: str) -> dict[type, Entry]:
    builder = _FEATURES.get(name)
    return builder() if builder is not None else {}


def _entry(rt: type) -> Entry | None:
    return _feature(rt.__module__.rpartition(".")[2]).get(rt)


def _per_type() -> dict[type, Entry]:
    """Every result type pd-doctor renders: (table, JSON document, markdown)."""
    out: dict[type, Entry] = {}
    for name in _FEATURES:
        out.update(_feature(name))
    return out


def _pick(entry: Entry, fmt: OutputFormat) -> Formatter:
    table, document, markdown = entry
    if fmt is OutputFormat.json:

        def as_json(r: Any, o: Options) -> str:
            from vllm_pd_doctor.formats._common import dumps

            return dumps(document(r, o))

        return as_json
    return table if fmt is OutputFormat.table else markdown


@functools.cache
def formatters() -> dict[tuple[type, OutputFormat], Formatter]:
    """Every (result type, format) pd-doctor renders, and the function that does it.

    Each result type (a `results.Result` subclass) has one entry per format;
    `tests/formats/test_formats.py` finds every `Result` subclass in the package and checks it has all.
    """
    return {(rt, fmt): _pick(entry, fmt) for rt, entry in _per_type().items() for fmt in OutputFormat}


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
    entry = _entry(type(result))
    if entry is None:
        raise TypeError(f"no json format for {type(result).__name__}")
    from vllm_pd_doctor.infra.sanitize import clean

    return _plain(entry[1](clean(result), Options(as_list=as_list)))


def emit(
    result: Result, fmt: OutputFormat, *, width: int = 110, color: bool = False, as_list: bool = False
) -> str:
    """`result` as text in `fmt`: the one way a command's result reaches its output."""
    entry = _entry(type(result))
    fn = None if entry is None else _pick(entry, OutputFormat(fmt))
    if fn is None:
        raise TypeError(f"no {OutputFormat(fmt).value} format for {type(result).__name__}")
    from vllm_pd_doctor.infra.sanitize import clean

    # input text (a config, a log line) never carries a control sequence into any format
    return fn(clean(result), Options(width=width, color=color, as_list=as_list))
