"""Redaction for a bundle users post publicly: secrets, hosts, addresses, home paths.

A `Redactor` is built once from what is known in advance (`RedactionContext`: the home path,
the host names named in the input, known secret values, --redact-extra patterns). It redacts:

- structured data at the value level (`obj`, `env`, `argv`, `json_text`): values under
  secret-named keys / variables / options whole, every other string as free text; numbers,
  booleans and null are never touched, so JSON stays valid and `ENABLE_AUTH=true` leaves every
  other `true` alone;
- free text (`text`, `file_name`): detect-secrets' plugins plus our own rules (rules.py,
  hosts.py). All detectors run on the original text; their spans are merged by priority and
  each is replaced by `<redacted:KIND>`. Multi-line private keys are matched on the whole text,
  so redact a log before cutting excerpts out of it (an excerpt cut inside a key block is still
  caught by the body-line rule).

It remembers the distinct values it replaced, by kind, so the report can list what was
redacted (`summary()`), without writing the values themselves.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from vllm_pd_doctor.infra.errors import BadInput
from vllm_pd_doctor.report.redact import hosts as _hosts
from vllm_pd_doctor.report.redact import rules as _rules
from vllm_pd_doctor.report.redact import structured as _structured
from vllm_pd_doctor.report.redact.hosts import hosts_in, machine_hosts
from vllm_pd_doctor.report.redact.rules import Span, is_ordinary, is_secret_name

PLACEHOLDER_RX = re.compile(r"<[a-z_]+-\d+>|<redacted:[a-z_]+>")

__all__ = [
    "HOME_PLACEHOLDER",
    "KIND_LABELS",
    "PLACEHOLDER",
    "RedactionContext",
    "Redactor",
    "compile_extra",
    "hosts_in",
    "is_secret_name",
    "machine_hosts",
    "secret_values",
]

PLACEHOLDER = "<redacted:{kind}>"
HOME_PLACEHOLDER = "~"

KIND_LABELS = {
    "private_key": "private key blocks",
    "extra": "matches of --redact-extra",
    "aws_access_key": "AWS access keys",
    "azure_key": "Azure keys and signatures",
    "gcp_key": "Google Cloud API keys and tokens",
    "github_token": "GitHub tokens",
    "gitlab_token": "GitLab tokens",
    "slack_token": "Slack tokens",
    "stripe_key": "Stripe keys",
    "openai_key": "OpenAI-style API keys",
    "hf_token": "Hugging Face tokens",
    "jwt": "JSON web tokens",
    "api_token": "other API tokens",
    "authorization": "authorization headers and bearer tokens",
    "url_credentials": "credentials in URLs",
    "secret": "values named like a secret",
    "high_entropy": "high-entropy strings",
    "hex_key": "keys of 40+ hex digits",
    "email": "e-mail addresses",
    "home": "home directory paths",
    "user": "user names in home paths",
    "host": "host names",
    "ip": "IP addresses",
    "namespace": "Kubernetes namespaces",
    "cluster": "cluster and context names",
    "pod": "pod names",
    "account": "cloud account ids",
    # kinds of earlier releases, still accepted by the renderer
    "bearer": "bearer tokens",
}

_PRIORITY = {k: i for i, k in enumerate(KIND_LABELS)}
_SECRET_KINDS = frozenset(KIND_LABELS) - {
    "email",
    "home",
    "user",
    "host",
    "ip",
    "namespace",
    "cluster",
    "pod",
}
_PLACEHOLDER_RX = PLACEHOLDER_RX
_JSON_STRING = re.compile(r'"(?:[^"\\\n]|\\.)*"')


def compile_extra(patterns: Iterable[str]) -> tuple[re.Pattern[str], ...]:
    """--redact-extra REGEX patterns, compiled (a bad one is BadInput, exit 2)."""
    out = []
    for p in patterns:
        try:
            rx = re.compile(p)
        except re.error as exc:
            raise BadInput(
                f"--redact-extra {p!r}: not a valid regular expression ({exc})",
                hint="use Python `re` syntax, e.g. 'cluster-[a-z0-9]+'",
            ) from None
        if rx.match(""):
            raise BadInput(
                f"--redact-extra {p!r}: matches the empty string",
                hint="give a pattern that matches the text to hide",
            )
        out.append(rx)
    return tuple(out)


@dataclass(frozen=True)
class RedactionContext:
    """What the redactor knows in advance."""

    home: str | None = None
    hosts: tuple[str, ...] = ()
    """Host names named in the input (commands, config, environment); short ones included."""
    redact_hosts: bool = True
    """Redact host names, IP and e-mail addresses (--no-redact-hosts keeps them)."""
    secrets: tuple[str, ...] = ()
    """Known secret values (e.g. of variables named like a secret), replaced wherever they are."""
    extra: tuple[str, ...] = ()
    """--redact-extra: site-specific regular expressions (group 1, else the whole match)."""
    machine: bool = True
    """Also look for this machine's own host names."""


@dataclass
class Redactor:
    """Replaces secrets, home paths, hosts and IPs; counts distinct values by kind."""

    ctx: RedactionContext = field(default_factory=RedactionContext)
    seen: dict[str, set[str]] = field(default_factory=dict)
    ph: Any = None
    """The bundle's `public.Placeholders` (same value, same placeholder); one of its own if None."""

    def __post_init__(self) -> None:
        if self.ph is None:
            from vllm_pd_doctor.report.public import Placeholders

            self.ph = Placeholders()
        self._extra = compile_extra(self.ctx.extra)
        known = sorted(
            {v for v in self.ctx.secrets if len(v) >= 4 and not is_ordinary(v)}, key=len, reverse=True
        )
        self._secret_rx = re.compile("|".join(re.escape(v) for v in known)) if known else None
        names = set(self.ctx.hosts)
        if self.ctx.machine:
            names |= machine_hosts()
        self._host_rx = _hosts.known_hosts_rx(names) if self.ctx.redact_hosts else None

    # --- bookkeeping -----------------------------------------------------------------------

    def _note(self, kind: str, value: str) -> str:
        """Remember a redacted value; its stable placeholder (`<host-1>`, `~` for the home)."""
        self.seen.setdefault(kind, set()).add(value)
        if kind == "home":
            return HOME_PLACEHOLDER
        return str(self.ph.get(kind, value))

    def summary(self) -> dict[str, int]:
        """Distinct values redacted, by kind (sorted by kind)."""
        return {k: len(v) for k, v in sorted(self.seen.items()) if v}

    counts = summary

    # --- free text -------------------------------------------------------------------------

    def _spans(self, s: str) -> Iterator[Span]:
        yield from _rules.private_keys(s)
        for rx in self._extra:
            for m in rx.finditer(s):
                g = 1 if rx.groups else 0
                if m.end(g) > m.start(g) >= 0:
                    yield Span(m.start(g), m.end(g), "extra")
        if self._secret_rx is not None:
            for m in self._secret_rx.finditer(s):
                yield Span(m.start(), m.end(), "secret")
        yield from _rules.own_tokens(s)
        yield from _rules.detect_secrets_spans(s)
        yield from _structured.structured(s)
        yield from _rules.assignments(s)
        yield from _rules.high_entropy(s)
        yield from _hosts.homes(s, self.ctx.home)
        if self.ctx.redact_hosts:
            yield from _hosts.emails(s)
            if self._host_rx is not None:
                for m in self._host_rx.finditer(s):
                    yield Span(m.start(1), m.end(1), "host")
            yield from _hosts.fqdns(s)
            yield from _hosts.ips(s)
            yield from _hosts.contexts(s)

    def text(self, s: str) -> str:
        """Redact one string of free text (a JSON document is redacted as JSON)."""
        if not s:
            return s
        head = s.lstrip()[:1]
        if head in ("{", "[") and s.rstrip()[-1:] in ("}", "]"):
            try:
                json.loads(s)
            except (ValueError, RecursionError):
                pass
            else:
                return self.json_text(s)
        return self._text(s)

    def _text(self, s: str) -> str:
        """Every character any detector flags is replaced: overlapping spans are merged (an S3
        URL's X-Amz-Signature inside a longer credential span is never dropped), and each
        merged run takes the kind of its highest-priority detector."""
        spans = []
        for sp in self._spans(s):
            start, end = _json_safe(s, sp.start, sp.end)
            if end > start and not _inside_placeholder(s, start, end):
                spans.append(Span(start, end, sp.kind))
        if not spans:
            return s
        spans.sort(key=lambda sp: (sp.start, -sp.end))
        merged: list[list[Any]] = []
        for sp in spans:
            if merged and sp.start < merged[-1][1]:
                run = merged[-1]
                run[1] = max(run[1], sp.end)
                if _PRIORITY.get(sp.kind, 99) < _PRIORITY.get(run[2], 99):
                    run[2] = sp.kind
            else:
                merged.append([sp.start, sp.end, sp.kind])
        out: list[str] = []
        pos = 0
        for start, end, kind in merged:
            value = s[start:end]
            if _PLACEHOLDER_RX.fullmatch(value) or value == HOME_PLACEHOLDER:
                continue
            out.append(s[pos:start])
            out.append(self._note(kind, value))
            out.append("\n" * value.count("\n"))  # a key block keeps its lines: line numbers hold
            pos = end
        out.append(s[pos:])
        return "".join(out)

    def file_name(self, name: str) -> str:
        """A file or zip entry name, redacted, with placeholders spelled as safe characters."""
        red = self._text(name)
        red = re.sub(r"<([a-z_]+)-(\d+)>", r"\1-\2", red)
        return re.sub(r"<redacted:([a-z_]+)>", r"redacted-\1", red).replace("~", "home")

    # --- structured data ------------------------------------------------------------------

    def value(self, name: str, value: str) -> str:
        """A value named `name` (variable, option or key): all of it when the name says secret
        (unless it is an ordinary value such as true or 8000), else as free text."""
        if value and is_secret_name(name) and not is_ordinary(value):
            return self._note("secret", value)
        kind = _named_kind(name) if self.ctx.redact_hosts else None
        if kind is not None and value and not is_ordinary(value) and not _PLACEHOLDER_RX.fullmatch(value):
            if kind == "host" and (value.lower() in _hosts.LOOPBACK_NAMES or value in ("0.0.0.0", "::")):
                return value
            if kind == "host" and (_hosts.valid_ipv4_loose(value) or _hosts.valid_ipv6(value)):
                kind = "ip"
            if re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.:\-]{0,253}", value):
                return self._note(kind, value)
        return self.text(value)

    env_value = value

    def env(self, environ: Mapping[str, str]) -> dict[str, str]:
        """An environment, value by value (names are kept)."""
        return {k: self.env_value(k, v) for k, v in environ.items()}

    def argv(self, args: Sequence[str]) -> list[str]:
        """A command line as a list: `--token X` / `--token=X` / `NAME=X` by name, the rest as
        free text."""
        out: list[str] = []
        secret_next = False
        for a in args:
            if secret_next and not a.startswith("--"):
                out.append(self.value("token", a) if not is_ordinary(a) else a)
                secret_next = False
                continue
            secret_next = False
            m = re.fullmatch(r"(--?[A-Za-z0-9_.\-]+|[A-Za-z_][A-Za-z0-9_]*)=(.*)", a, re.DOTALL)
            if m:
                out.append(f"{self.text(m.group(1))}={self.value(m.group(1), m.group(2))}")
                continue
            if a.startswith("-") and is_secret_name(a):
                secret_next = True
            out.append(self.text(a))
        return out

    def obj(self, o: Any) -> Any:
        """Redact every string in a JSON-like value; values under secret-named keys whole."""
        if isinstance(o, str):
            return self.text(o)
        if isinstance(o, Mapping):
            out: dict[Any, Any] = {}
            for k, v in o.items():
                key = self.text(k) if isinstance(k, str) else k
                if isinstance(k, str) and isinstance(v, str):
                    out[key] = self.value(k, v)
                elif isinstance(k, str) and isinstance(v, (list, tuple)) and is_secret_name(k):
                    out[key] = [self.value(k, x) if isinstance(x, str) else self.obj(x) for x in v]
                else:
                    out[key] = self.obj(v)
            return out
        if isinstance(o, (list, tuple)):
            return [self.obj(v) for v in o]
        return o

    def json_text(self, s: str) -> str:
        """Redact a JSON document in place, string literal by string literal: the layout is
        kept, every non-string value is untouched, the result stays valid JSON."""
        out: list[str] = []
        pos = 0
        last_key: str | None = None
        for m in _JSON_STRING.finditer(s):
            out.append(s[pos : m.start()])
            literal = m.group(0)
            try:
                value = json.loads(literal)
            except ValueError:
                out.append(literal)
                pos = m.end()
                continue
            rest = s[m.end() : m.end() + 64].lstrip()
            is_key = rest.startswith(":")
            if is_key:
                new = self.text(value)
                last_key = value
            else:
                before = s[max(0, m.start() - 64) : m.start()].rstrip()
                in_list = before.endswith(("[", ",")) and last_key is not None and is_secret_name(last_key)
                named = last_key if before.endswith(":") or in_list else None
                new = self.value(named, value) if named is not None else self.text(value)
            if new != value:
                literal = json.dumps(new, ensure_ascii=literal.isascii())
            out.append(literal)
            pos = m.end()
        out.append(s[pos:])
        return "".join(out)


_NAMED_KINDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)(?:end_?)?user(?:_?(?:id|name))?|username|customer_?id|login|owner"), "user"),
    (re.compile(r"(?i)(?:kube_?)?namespace|ns"), "namespace"),
    (re.compile(r"(?i)cluster(?:_?name)?|kube_?context|context"), "cluster"),
    (re.compile(r"(?i)pod(?:_?name)?"), "pod"),
    (
        re.compile(r"(?i)node_?name|host(?:_?name)?|[a-z_]*_(?:host|addr|address)|master_?addr(?:ess)?"),
        "host",
    ),
)


def _named_kind(name: str | None) -> str | None:
    """The kind of identifier a key names (`"user": ...`, `namespace: ...`, `nodeName: ...`)."""
    if not name:
        return None
    n = name.strip().strip("\"'").lstrip("-").replace("-", "_")
    return next((kind for rx, kind in _NAMED_KINDS if rx.fullmatch(n)), None)


def _inside_placeholder(s: str, start: int, end: int) -> bool:
    """A span that lies inside a placeholder already written (never redacted twice)."""
    lo = s.rfind("<", max(0, start - 40), start + 1)
    if lo < 0:
        return False
    m = _PLACEHOLDER_RX.match(s, lo)
    return m is not None and m.end() >= end


def _json_safe(s: str, start: int, end: int) -> tuple[int, int]:
    """Keep a span from splitting a backslash escape or eating a quote (JSON inside logs)."""
    backslashes = 0
    i = start - 1
    while i >= 0 and s[i] == "\\":
        backslashes += 1
        i -= 1
    if backslashes % 2 == 1 and s[start : start + 1] in tuple('nrtbfu"/\\'):
        start += 1  # the span began on an escape's letter (\n, \t ...)
    while end > start and s[end - 1] == "\\":
        end -= 1
    return start, end


def secret_values(environ: Mapping[str, str]) -> tuple[str, ...]:
    """Values of the variables named like a secret (to redact wherever they appear); ordinary
    values (true, 8000, ...) are left out."""
    return tuple(
        sorted({v for k, v in environ.items() if is_secret_name(k) and len(v) >= 4 and not is_ordinary(v)})
    )
