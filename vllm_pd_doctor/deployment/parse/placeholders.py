"""One rule for templates that were never filled in: a server argument that is a placeholder
(`<model-path>`, `{model}`, `{{ .Values.model }}`, `REPLACE_ME`, `YOUR_MODEL`) is bad input (exit
2) naming the placeholder and where it is; it is never read as a value (nor `<...>` as a shell
redirection: `shell.words`). A `${VAR}` never set is named the same way where a value is needed
(`args`: `--port ${PORT}` needs an integer; a model left as `${MODEL_PATH}` is kept, unknown, for
the checks that do not need it); an empty value (`--port --data-parallel-size 2`) too.
"""

from __future__ import annotations

import re

from vllm_pd_doctor.deployment.parse.found import Found
from vllm_pd_doctor.infra.errors import BadInput

_WHOLE = re.compile(r"^(?:--[\w.-]+=)?(<[A-Za-z][\w .:/-]*>|\{\{[^{}]*\}\}|\{[A-Za-z_.][\w.-]*\})$")
"""`<model-path>`, `{{ .Values.model }}`, `{model}`: the whole argument (or a `--flag=` value)."""
_PATH = re.compile(r"(?:^|[=/])(<[A-Za-z][\w .:-]*>)(?=/|$)")
"""`<path_to_your_model>/Qwen2.5-72B-Instruct/`: an angle placeholder as a path component."""
_MARKER = re.compile(r"\b(REPLACE[_-]?ME|CHANGE[_-]?ME|YOUR[_-][A-Z0-9_-]+|TODO|FIXME)\b")
"""Words written to be replaced (upper case, as templates write them)."""


def check(found: list[Found], label: str) -> None:
    """BadInput for the first placeholder in any server's arguments."""
    for f in found:
        got = _first(f.args)
        if got is None:
            continue
        k, text = got
        name = f.name or f.role or "server"
        where = (
            f"the value of {f.args[k - 1]}"
            if k > 0 and f.args[k - 1].startswith("-")
            else ("the model" if k == 0 else f"argument {k + 1}")
        )
        raise BadInput(
            f"{label} ({name}): {text!r} is a placeholder, not a value ({where}): the setup is a template",
            hint="fill it in with the real value, then check the filled-in setup",
        )


def _first(args: list[str]) -> tuple[int, str] | None:
    """(index, placeholder) of the first placeholder."""
    for k, a in enumerate(args):
        if a == "{{" or a.endswith("={{"):  # `--host={{ .Values.host }}` split into words by the shell
            end = next((j for j in range(k + 1, len(args)) if args[j] == "}}"), None)
            if end is not None:
                return k, " ".join(["{{", *args[k + 1 : end], "}}"])
        m = _WHOLE.match(a)
        if m:
            return k, m.group(1)
        m1 = _PATH.search(a)
        if m1:
            return k, m1.group(1)
        m2 = _MARKER.search(a)
        if m2 and not a.lstrip().startswith("{"):  # inside a JSON value a word is data
            return k, m2.group(1)
    return None
