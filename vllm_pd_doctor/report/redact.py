"""Redaction of secrets, the home path, host names and IP addresses (pure functions).

A `Redactor` is built once from what is known about the machine and the user's commands
(`RedactionContext`); it replaces every match with a placeholder naming its kind and
remembers the distinct values it replaced, so the report can say what was redacted, by
kind and count, without ever writing the values themselves.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

PLACEHOLDER = "<redacted:{kind}>"
HOME_PLACEHOLDER = "~"

KIND_LABELS = {
    "hf_token": "Hugging Face tokens",
    "openai_key": "OpenAI-style API keys",
    "aws_access_key": "AWS access key ids",
    "github_token": "GitHub tokens",
    "slack_token": "Slack tokens",
    "bearer": "bearer tokens",
    "url_credentials": "passwords in URLs",
    "private_key": "private key blocks",
    "secret": "values named like a secret",
    "home": "home directory paths",
    "host": "host names",
    "ip": "IP addresses",
}

_SECRET_NAME = r"[A-Za-z0-9_.\-]*(?:token|secret|passwd|password|api[_\-]?key|access[_\-]?key|" \
               r"private[_\-]?key|secret[_\-]?key|credentials?|auth)"
_SECRET_NAME_RE = re.compile(rf"^{_SECRET_NAME}$", re.IGNORECASE)

# (kind, pattern, group holding the secret value or 0 for the whole match)
_PATTERNS: tuple[tuple[str, re.Pattern[str], int], ...] = (
    ("private_key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----",
                               re.DOTALL), 0),
    ("hf_token", re.compile(r"\bhf_[A-Za-z0-9]{20,}\b"), 0),
    ("openai_key", re.compile(r"\bsk-(?:proj-|ant-)?[A-Za-z0-9_\-]{16,}"), 0),
    ("aws_access_key", re.compile(r"\b(?:AKIA|ASIA)[0-9A-Z]{16}\b"), 0),
    ("github_token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})\b"), 0),
    ("slack_token", re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"), 0),
    ("bearer", re.compile(r"(?i)\bbearer\s+([A-Za-z0-9_\-.=~+/]{8,})"), 1),
    ("url_credentials", re.compile(r"\b[a-z][a-z0-9+.\-]*://[^\s/:@]+:([^\s/@]+)@"), 1),
    # NAME=value, NAME: value, "NAME": "value", --name value, --name=value
    ("secret", re.compile(
        rf"(?i)--({_SECRET_NAME})(?:=|\s+)[\"']?(?!<redacted)([^\s\"',;}}\]]{{4,}})"), 2),
    ("secret", re.compile(
        rf"(?i)(?<![A-Za-z0-9_\-])({_SECRET_NAME})[\"']?\s*[=:]\s*[\"']?"
        r"(?!<redacted)([^\s\"',;}\]]{4,})"), 2),
)

_IPV4 = re.compile(r"(?<![\d.])(?<![A-Za-z])(\d{1,3}(?:\.\d{1,3}){3})(?![\d]|\.\d)")
_IPV6 = re.compile(r"(?<![0-9A-Za-z:.])([0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7})(?![0-9A-Za-z:])")
_URL_HOST = re.compile(r"\b[a-z][a-z0-9+.\-]*://(?:[^\s/@]+@)?([A-Za-z0-9.\-]+)")
_FQDN = re.compile(r"(?<![A-Za-z0-9.\-/])((?:[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?\.)+"
                   r"(?:com|net|org|io|ai|cloud|internal|local|lan|corp|intra|cluster|svc|edu|gov|dev))"
                   r"(?![A-Za-z0-9\-])", re.IGNORECASE)
_LOOPBACK_NAMES = {"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"}
_HOST_NAME = r"(?:[a-z_\-]*host(?:name)?|[a-z_\-]*_ip|[a-z_\-]*addr(?:ess)?)"
_HOST_FLAG = re.compile(rf"(?i)(?:--{_HOST_NAME}(?:=|\s+)|\b{_HOST_NAME}[\"']?\s*[=:]\s*)[\"']?"
                        r"([A-Za-z0-9][A-Za-z0-9.\-]*)")
_KNOWN_PUBLIC_HOSTS = {"github.com", "huggingface.co", "pypi.org", "docs.vllm.ai", "vllm.ai",
                       "download.pytorch.org", "files.pythonhosted.org"}


@dataclass(frozen=True)
class RedactionContext:
    """What the redactor knows in advance: the home path and host names to look for."""

    home: str | None = None
    hosts: tuple[str, ...] = ()
    redact_hosts: bool = True
    secrets: tuple[str, ...] = ()
    """Known secret values (e.g. of environment variables named like a secret), replaced
    wherever they appear."""


def _is_loopback_or_unspecified(text: str) -> bool:
    try:
        ip = ipaddress.ip_address(text)
    except ValueError:
        return True  # not an address at all: leave it
    return ip.is_loopback or ip.is_unspecified


def _valid_ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


def _valid_ipv6(text: str) -> bool:
    if text.count(":") < 2:
        return False
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def hosts_in(text: str) -> set[str]:
    """Host names (not addresses) named in a command line or config text."""
    found: set[str] = set()
    for rx in (_URL_HOST, _HOST_FLAG):
        for m in rx.finditer(text):
            found.add(m.group(1))
    for m in _FQDN.finditer(text):
        found.add(m.group(1))
    return {h.strip(".") for h in found if h and not _valid_ipv4(h) and not h.isdigit()}


def _host_variants(hosts: Iterable[str]) -> set[str]:
    out: set[str] = set()
    for h in hosts:
        h = h.strip().strip(".")
        if not h or h.lower() in _LOOPBACK_NAMES or h.lower() in _KNOWN_PUBLIC_HOSTS:
            continue
        if _valid_ipv4(h) or ":" in h or len(h) < 3 or h.replace(".", "").isdigit():
            continue
        out.add(h)
        first = h.split(".")[0]
        if "." in h and len(first) >= 4 and any(c.isdigit() or c == "-" for c in first):
            out.add(first)  # the short name of a FQDN like gpu-node-7.example.com
    return out


@dataclass
class Redactor:
    """Replaces secrets, home paths, hosts and IPs; counts distinct values by kind."""

    ctx: RedactionContext
    seen: dict[str, set[str]] = field(default_factory=dict)
    _host_rx: re.Pattern[str] | None = None
    _home_rx: re.Pattern[str] | None = None
    _secret_rx: re.Pattern[str] | None = None

    def __post_init__(self) -> None:
        known = sorted({v for v in self.ctx.secrets if len(v) >= 4}, key=len, reverse=True)
        if known:
            self._secret_rx = re.compile("(" + "|".join(re.escape(v) for v in known) + ")")
        hosts = sorted(_host_variants(self.ctx.hosts), key=len, reverse=True)
        if hosts and self.ctx.redact_hosts:
            alt = "|".join(re.escape(h) for h in hosts)
            self._host_rx = re.compile(rf"(?<![A-Za-z0-9\-.])({alt})(?![A-Za-z0-9\-])", re.IGNORECASE)
        home = (self.ctx.home or "").rstrip("/")
        if home and home != "/" and len(home) > 1:
            self._home_rx = re.compile(re.escape(home) + r"(?![A-Za-z0-9_.\-])")

    def _note(self, kind: str, value: str) -> None:
        self.seen.setdefault(kind, set()).add(value)

    def text(self, s: str) -> str:
        """Redact one string."""
        if not s:
            return s
        for kind, rx, grp in _PATTERNS:
            s = self._sub(s, kind, rx, grp)
        if self._secret_rx is not None:
            s = self._sub(s, "secret", self._secret_rx, 1)
        if self._home_rx is not None:
            def home(m: re.Match[str]) -> str:
                self._note("home", m.group(0))
                return HOME_PLACEHOLDER
            s = self._home_rx.sub(home, s)
        if self.ctx.redact_hosts:
            if self._host_rx is not None:
                s = self._sub(s, "host", self._host_rx, 1)
            s = self._sub(s, "host", _FQDN, 1)
            s = self._sub_ip(s, _IPV4, _valid_ipv4)
            s = self._sub_ip(s, _IPV6, _valid_ipv6)
        return s

    def _sub(self, s: str, kind: str, rx: re.Pattern[str], grp: int) -> str:
        def repl(m: re.Match[str]) -> str:
            value = m.group(grp)
            if kind == "host" and value.lower() in _KNOWN_PUBLIC_HOSTS | _LOOPBACK_NAMES:
                return m.group(0)
            if value.startswith("<redacted") or value == HOME_PLACEHOLDER:
                return m.group(0)
            self._note(kind, value)
            start, end = m.start(grp) - m.start(0), m.end(grp) - m.start(0)
            whole = m.group(0)
            return whole[:start] + PLACEHOLDER.format(kind=kind) + whole[end:]
        return rx.sub(repl, s)

    def _sub_ip(self, s: str, rx: re.Pattern[str], valid: Any) -> str:
        def repl(m: re.Match[str]) -> str:
            value = m.group(1)
            if not valid(value) or _is_loopback_or_unspecified(value):
                return m.group(0)
            self._note("ip", value)
            return PLACEHOLDER.format(kind="ip")
        return rx.sub(repl, s)

    def obj(self, o: Any) -> Any:
        """Redact every string in a JSON-like value; values under secret-named keys entirely."""
        if isinstance(o, str):
            return self.text(o)
        if isinstance(o, dict):
            out: dict[Any, Any] = {}
            for k, v in o.items():
                key = self.text(k) if isinstance(k, str) else k
                if isinstance(k, str) and _SECRET_NAME_RE.match(k) and isinstance(v, str) and v \
                        and not v.startswith("<redacted"):
                    self._note("secret", v)
                    out[key] = PLACEHOLDER.format(kind="secret")
                else:
                    out[key] = self.obj(v)
            return out
        if isinstance(o, (list, tuple)):
            return [self.obj(v) for v in o]
        return o

    def env_value(self, name: str, value: str) -> str:
        """An environment variable's value: all of it when the name looks like a secret."""
        if _SECRET_NAME_RE.match(name) and value:
            if value not in set().union(*self.seen.values()) and self.text(value) == value:
                self._note("secret", value)
            return PLACEHOLDER.format(kind="secret")
        return self.text(value)

    def summary(self) -> dict[str, int]:
        """Distinct values redacted, by kind (sorted by kind)."""
        return {k: len(v) for k, v in sorted(self.seen.items()) if v}


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME_RE.match(name))


def secret_values(environ: Mapping[str, str]) -> tuple[str, ...]:
    """Values of the variables named like a secret (to redact wherever they appear)."""
    return tuple(sorted({v for k, v in environ.items() if is_secret_name(k) and len(v) >= 4}))
