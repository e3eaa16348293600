"""Shell scripts and pasted text: `vllm serve` lines, launcher scripts (srun, docker run, ssh,
dynamo.vllm ...), and what people paste: Markdown code fences, `$ ` and `> ` prompts, numbered
lines, prose between commands. The text runs symbolically (`parse.symbolic`); labels (`prefill:`)
and comments naming a role become hints for the next server, the ports a P/D proxy names hints
for the servers on them.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import replace
from typing import Any

from vllm_pd_doctor.deployment.parse import bounded, paste
from vllm_pd_doctor.deployment.parse.found import Found
from vllm_pd_doctor.deployment.parse.manifests import role_from_name
from vllm_pd_doctor.deployment.parse.registry import DeploymentFormat, Source, walk
from vllm_pd_doctor.deployment.parse.symbolic import Interp
from vllm_pd_doctor.infra.errors import BadInput
from vllm_pd_doctor.infra.shell.words import ShellSyntaxError

FENCE = re.compile(
    r"^[ \t]*```[ \t]*(bash|sh|shell|console|zsh|text)?[ \t]*\n(.*?)^[ \t]*```", re.MULTILINE | re.DOTALL
)
YAML_FENCE = re.compile(r"^[ \t]*```[ \t]*(?:yaml|yml)[ \t]*\n(.*?)^[ \t]*```", re.MULTILINE | re.DOTALL)
_LABEL = re.compile(r"^(\s*)(prefill|decode)\s*[:=]\s*", re.IGNORECASE | re.MULTILINE)
_PROMPT_CONT = re.compile(r"(\\\r?\n)[ \t]*> ")
_PROMPT = re.compile(r"^([ \t]*)\$ (?=\S)", re.MULTILINE)
_COMMENT = re.compile(r"^([ \t]*)#(?!!)(.*)$", re.MULTILINE)


def sniff(src: Source) -> bool:
    """Any text (the last format tried)."""
    return src.given_docs is None


def read(src: Source) -> list[Found] | None:
    """The servers the text starts; None when it starts none (another format may read the page)."""
    it = Interp(src.variables, pinned=src.variables)
    try:
        it.run_text(paste.without_prose(prepare(src.text)))
    except ShellSyntaxError as exc:
        raise BadInput(
            f"{src.label}: cannot split the command ({exc})",
            hint="check the quotes around JSON values such as --kv-transfer-config",
        ) from None
    except RecursionError:
        raise BadInput(f"{src.label}: shell text nested too deeply") from None
    if not it.found and it.unresolved_modules:
        name = it.unresolved_modules[0]
        raise BadInput(
            f"{src.label}: no launch command found: `python -m ${name}` starts a module the file "
            "does not name",
            hint=f"give it: --set {name}={_module_named(src.text)}",
        )
    for f in it.found:
        f.notes += [f"proxy-role:{port}:{role}" for port, role in it.proxy_roles.items()]
    found = it.found + _deployed(it, src)
    if found:
        src.others.extend(it.others)
    return found if found or it.proxy_roles else None


def _deployed(it: Interp, src: Source) -> list[Found]:
    """The servers in the manifests the text writes with heredocs (`cat > F <<EOF`, `tee F`) or
    pipes into `kubectl apply -f -`, read by the document formats as the files they are."""
    from vllm_pd_doctor.deployment.parse.formats import DOCUMENT_FORMATS

    docs: list[Any] = []
    for where, text in it.manifests():
        try:
            docs += [d for d in bounded.load_yaml_all(text, f"{src.label} ({where})") if isinstance(d, dict)]
        except BadInput:
            continue
    if not docs:
        return []
    try:
        hit = walk(replace(src, given_docs=tuple(docs)), DOCUMENT_FORMATS)
    except BadInput:
        if it.applied:
            raise  # what the text deploys is broken: say so
        return []  # a file the text writes (a values file, a config) is not a deployment
    return hit[1] if hit else []


FORMAT = DeploymentFormat("shell-script", sniff, read)


def prepare(text: str) -> str:
    """What people paste: Markdown code fences, `$ ` prompts, `> ` continuation prompts;
    labels (`prefill:`) and comments naming a role become hints for the next server (never inside
    a heredoc: a manifest's `prefill:` key stays a key)."""
    text = paste.normalise(text)
    blocks = [textwrap.dedent(m.group(2)) for m in FENCE.finditer(text)]
    if blocks:
        text = "\n".join(blocks)
    return "".join(body if inside else _hints(body) for inside, body in _heredoc_split(text))


def _hints(text: str) -> str:
    text = _PROMPT_CONT.sub(lambda m: m.group(1), text)
    text = _PROMPT.sub(lambda m: m.group(1), text)
    text = _LABEL.sub(lambda m: f"{m.group(1)}__pdd_role {m.group(2).lower()}; ", text)

    def comment(m: re.Match[str]) -> str:
        r = role_from_name(m.group(2))
        return f"{m.group(1)}__pdd_comment {r}" if r else m.group(0)

    return _COMMENT.sub(comment, text)


_HEREDOC = re.compile(r"<<-?[ \t]*(['\"]?)\\?([A-Za-z_][\w.-]*)\1")


def _heredoc_split(text: str) -> list[tuple[bool, str]]:
    """The text in pieces, (inside a heredoc body, piece), in order."""
    out: list[tuple[bool, str]] = []
    lines = text.splitlines(keepends=True)
    k = 0
    shell: list[str] = []
    while k < len(lines):
        line = lines[k]
        shell.append(line)
        k += 1
        delims = [m.group(2) for m in _HEREDOC.finditer(line) if "<<<" not in line[m.start() : m.start() + 3]]
        for delim in delims:
            body: list[str] = []
            while k < len(lines) and lines[k].strip() != delim:
                body.append(lines[k])
                k += 1
            out += [(False, "".join(shell)), (True, "".join(body))]
            shell = [lines[k]] if k < len(lines) else []
            k += 1
    out.append((False, "".join(shell)))
    return out


def _module_named(text: str) -> str:
    """The server module a file's text names (for the `--set WORKER_MODULE=...` hint)."""
    m = re.search(r"\b(dynamo\.vllm|vllm\.entrypoints\.openai\.api_server)\b", text)
    if m:
        return m.group(1)
    return "vllm.entrypoints.openai.api_server" if re.search(r"vllm[ \t]+serve", text) else "MODULE"
