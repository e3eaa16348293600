"""Secrets in shapes a `name=value` rule cannot see (the second line's structured rules).

Lists under secret names (vLLM's own `non-default args: {'api_key': ['KEY']}`), quoted values
with spaces or `;`, YAML block scalars, K8s `- name: X_TOKEN` / `value: ...` pairs, `.netrc`
passwords, keys of 40 hex digits, and the values behind the short flags of tools that take a
password (`redis-cli -a`, `curl -u`, `sshpass -p`, `mysql -p`, `az login -p`, `wandb login`,
`vault login`). Each pattern runs from its keyword out, so every one is linear in the text.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

from vllm_pd_doctor.report.redact.rules import Span, is_ordinary, is_secret_name

_HIT = r"token|secret|passw|passphrase|api_?key|apikey|access_?key|private_?key|credential|auth"
_SECRET_HIT = re.compile(_HIT)
_SECRET_HIT_ANY_CASE = re.compile(_HIT, re.IGNORECASE)


def lowered(text: str) -> tuple[str, re.Pattern[str] | None]:
    """The text in lower case when that keeps every index (ASCII and most text), for fast
    case-sensitive keyword scans; else the text itself (scan it case-insensitively)."""
    low = text.lower()
    return (low, None) if len(low) == len(text) else (text, _SECRET_HIT_ANY_CASE)


_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-")
# what follows a secret's name (matched at the name's end, so every pattern runs in linear time)
_LIST_TAIL = re.compile(r"[\"']?\s*(?:=|:)\s*[\[(]([^\]\)\n]{1,4000})[\])]")
_ITEM = re.compile(r"\"((?:[^\"\\]|\\.)+)\"|'((?:[^'\\]|\\.)+)'|([^\s,\"']+)")
_QUOTED_TAIL = re.compile(r"[\"']?\s*(?:=|:=|:|=>)\s*([\"'])([^\"'\n]{1,1000})\1")
_BLOCK_TAIL = re.compile(r"\s*:\s*[|>][+\-]?\d*[ \t]*\n")
_K8S_TAIL = re.compile(r"[\"']?[ \t]*\n[ \t]*value\s*:\s*([\"']?)([^\n]+?)\1[ \t]*$", re.MULTILINE)
_K8S_HEAD = re.compile(r"(?i)name\s*:\s*[\"']?$")


def _secret_names(text: str) -> Iterator[tuple[int, int]]:
    """(start, end) of each word that names a secret (`REDIS_PASSWORD`, `api_key`, `x-auth-token`),
    found from the keyword out (linear: no pattern scans ahead of every position)."""
    last_end = -1
    scan, any_case = lowered(text)
    for m in (any_case or _SECRET_HIT).finditer(scan):
        if m.start() < last_end:
            continue
        i, j = m.start(), m.end()
        while i > 0 and text[i - 1] in _NAME_CHARS and m.start() - i < 128:
            i -= 1
        while j < len(text) and text[j] in _NAME_CHARS and j - m.end() < 128:
            j += 1
        last_end = j
        yield i, j


def _block(text: str, start: int, end: int) -> Span | None:
    """A YAML block scalar under a secret's name: its indented lines."""
    t = _BLOCK_TAIL.match(text, end)
    line_start = text.rfind("\n", 0, start) + 1
    if t is None or text[line_start:start].strip(" \t-"):
        return None
    indent = len(text[line_start:start]) - len(text[line_start:start].lstrip(" \t-"))
    pos = stop = t.end()
    while pos < len(text):
        nl = text.find("\n", pos)
        line = text[pos : len(text) if nl < 0 else nl]
        if line.strip() and len(line) - len(line.lstrip(" \t")) <= indent:
            break
        stop = len(text) if nl < 0 else nl
        pos = stop + 1
    return Span(t.end(), stop, "secret") if stop > t.end() else None


def _named(text: str) -> Iterator[Span]:
    for start, end in _secret_names(text):
        if not is_secret_name(text[start:end]):
            continue
        m = _LIST_TAIL.match(text, end)
        if m is not None:
            base = m.start(1)
            for it in _ITEM.finditer(m.group(1)):
                g = next(i for i in (1, 2, 3) if it.group(i) is not None)
                if not is_ordinary(it.group(g)):
                    yield Span(base + it.start(g), base + it.end(g), "secret")
        m = _QUOTED_TAIL.match(text, end)
        if m is not None and not is_ordinary(m.group(2)):
            yield Span(m.start(2), m.end(2), "secret")
        blk = _block(text, start, end)
        if blk is not None:
            yield blk
        if _K8S_HEAD.search(text, max(0, start - 16), start):
            m = _K8S_TAIL.match(text, end)
            if m is not None and not is_ordinary(m.group(2)):
                yield Span(m.start(2), m.end(2), "secret")


_NETRC_PW = re.compile(r"(?i)\b(?:password|passwd|account)\s+(?!<)(\S+)")
_HEX_KEY = re.compile(r"(?<![0-9A-Za-z])(?:[0-9a-f]{40}|[0-9A-F]{40})(?![0-9A-Za-z])")
_TOOL_FLAGS: tuple[re.Pattern[str], ...] = tuple(
    re.compile(rx)
    for rx in (
        r"\bredis-cli\b[^\n|;&]*?\s-a\s+(?!-)(\S+)",
        r"\bcurl\b[^\n|;&]*?\s(?:-u|--user|--proxy-user)\s*(?!-)(\S+)",
        r"\bsshpass\b[^\n|;&]*?\s-p\s*(?!-)(\S+)",
        r"\b(?:mysql|mysqldump|mysqladmin|mariadb)\b[^\n|;&]*?\s-p(?!\s)([^\s]+)",
        r"\b(?:mysql|mysqldump|mariadb|mongo|mongosh|psql)\b[^\n|;&]*?\s--password[=\s]+(?!-)(\S+)",
        r"\b(?:mongo|mongosh)\b[^\n|;&]*?\s-p\s+(?!-)(\S+)",
        r"\baz\s+login\b[^\n|;&]*?\s(?:-p|--password)[=\s]+(?!-)(\S+)",
        r"\bwandb\s+login\s+(?:--?[A-Za-z\-]+(?:=\S+)?\s+)*(?!-)(\S+)",
        r"\bvault\s+login\s+(?:-[A-Za-z\-]+(?:=\S+)?\s+)*(?!-)(\S+)",
        r"\b(?:docker|podman|helm|oras|skopeo)\b[^\n|;&]*?\blogin\b[^\n|;&]*?\s(?:-p|--password)[=\s]+(?!-)(\S+)",
        r"\bldap(?:search|modify|add|delete)\b[^\n|;&]*?\s-w\s+(?!-)(\S+)",
        r"\bsmbclient\b[^\n|;&]*?\s-U\s+\S*?%(\S+)",
        r"\b(?:pass|env|file):([^\s\\\"']{4,})(?=\s|$)",
        r"(?m)\bhtpasswd\b(?=[^\n]*\s-[a-zA-Z]*b)[^\n]*\s(\S+)[ \t]*$",
        r"\bhuggingface-cli\s+login\s+(?:--\S+\s+)*(?!-)(\S+)",
        r"\bgh\s+auth\s+login\b[^\n]*?--with-token[=\s]+(?!-)(\S+)",
        r"\bkubectl\b[^\n|;&]*?\s--(?:token|password)[=\s]+(?!-)(\S+)",
        r"(?i)\bIDENTIFIED\s+BY\s+'([^']+)'",
        r"/api/webhooks/\d+/([A-Za-z0-9_\-]{16,})",
        r"(?i)\b(?:password|passwd|passphrase|secret|token|api[ _\-]?key)\s+(?:is|was|of|=)\s+"
        r"[\"'`]?([^\s\"'`]{4,})",
    )
)


_TOOL_NEEDLES: tuple[str | tuple[str, ...], ...] = (
    "redis-cli",
    "curl",
    "sshpass",
    "mysql",
    "--password",
    "mongo",
    "az ",
    "wandb",
    "vault",
    "login",
    "ldap",
    "smbclient",
    "pass:",
    "htpasswd",
    "huggingface-cli",
    "with-token",
    "kubectl",
    "identified",
    "webhooks",
    ("pass", "secret", "token", "api"),
)


def structured(text: str) -> Iterator[Span]:
    """Secrets in shapes a `name=value` rule cannot see: lists under secret names (vLLM's own
    `non-default args: {'api_key': ['KEY']}`), YAML block scalars, K8s `- name: X_TOKEN` /
    `value: ...` pairs, .netrc `password`, 40+ hex digit keys, and the values behind the short
    flags of tools that take a password (`redis-cli -a`, `curl -u`, `mysql -p`, `vault login`)."""
    yield from _named(text)
    if "machine " in text or ".netrc" in text:
        for m in _NETRC_PW.finditer(text):
            yield Span(m.start(1), m.end(1), "secret")
    for m in _HEX_KEY.finditer(text):
        yield Span(m.start(), m.end(), "hex_key")
    low = text.lower()
    for needle, rx in zip(_TOOL_NEEDLES, _TOOL_FLAGS, strict=True):
        if not any(n in low for n in ((needle,) if isinstance(needle, str) else needle)):
            continue
        for m in rx.finditer(text):
            if not is_ordinary(m.group(1)):
                yield Span(m.start(1), m.end(1), "secret")
