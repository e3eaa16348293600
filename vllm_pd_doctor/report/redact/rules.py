"""Secret detectors for free text: detect-secrets' plugins plus pd-doctor's own rules.

Each detector yields `Span(start, end, kind)` over the text it is given; the redactor merges
them. Nothing here rewrites text.

Decisions (tested in tests/report/test_redaction.py):
- detect-secrets' regex plugins are used as a library (no baseline, no verification, no
  network). Their match is extended over the token characters that follow it, so a long Stripe
  key or a JWT's signature goes with the part the plugin recognised.
- High-entropy strings: only base64-like tokens of 24+ characters mixing upper case, lower case
  and digits, not part of a path, above an entropy floor. Hex strings (block hashes, request
  ids, commit SHAs) are never redacted for entropy alone: a bug report needs them, and they are
  what vLLM logs by the thousand.
- Private keys: BEGIN..END blocks; a BEGIN without an END runs to the end of the text, an END
  without a BEGIN back over the base64 lines before it, and base64 body lines on their own are
  caught too, so an excerpt cut inside a block leaks nothing.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from typing import Any


@dataclass(frozen=True)
class Span:
    start: int
    end: int
    kind: str


_TOKEN_TAIL = re.compile(r"[A-Za-z0-9_\-+/=.~]*")

# --- secret-named variables, options and keys ---------------------------------------------------

_SECRET_NAME_RE = re.compile(
    r"(?i)^(?:.*[_.\-])?(?:token|secret|secrets|password|passwd|passphrase|pwd|pw|pass|key|apikey|"
    r"access_?key_?id|key_?id|credential|credentials|auth|authorization|cookie|signature|dsn|"
    r"session_?id|private_?key)$"
    r"|^.*(?:secret|password|passwd|api_?key|access_?key|private_?key|auth_?token).*$"
)

ORDINARY_VALUES = frozenset(
    {
        "",
        "true",
        "false",
        "yes",
        "no",
        "on",
        "off",
        "none",
        "null",
        "nil",
        "0",
        "1",
        "-1",
        "enabled",
        "disabled",
        "enable",
        "disable",
        "required",
        "optional",
        "auto",
        "default",
        "unset",
        "empty",
        "n/a",
        "na",
        "***",
        "<redacted>",
        "changeme",
    }
)


def is_secret_name(name: str) -> bool:
    """Whether a variable / option / key name says its value is a secret (HF_TOKEN, *_KEY,
    AWS_ACCESS_KEY_ID, PASSWORD ...; not max_num_batched_tokens or tokenizer)."""
    name = name.strip().lstrip("-").strip("\"'")
    return bool(name) and len(name) <= 128 and bool(_SECRET_NAME_RE.match(name))


_WEAK_NAME_RE = re.compile(r"(?i)^(?:.*[_.\-])?(?:key|signature|auth|dsn|cookie|session_?id|key_?id)$")
"""Secret names that are also ordinary words in logs (`signature: nixl_compat_ok`,
`key: cache_config`): in free text their value must itself look like a secret."""
_PLAIN_WORD = re.compile(r"[A-Za-z]+(?:[_.\-][A-Za-z]+)*")


def is_weak_secret_name(name: str) -> bool:
    """A secret-like name that is not enough on its own in free text (see `_WEAK_NAME_RE`)."""
    name = name.strip().lstrip("-").strip("\"'")
    return bool(_WEAK_NAME_RE.match(name)) and not re.search(
        r"(?i)secret|pass|pwd|api[_\-]?key|access[_\-]?key|private[_\-]?key|auth[_\-]?token", name
    )


def looks_like_plain_word(value: str) -> bool:
    """Letters only, maybe joined by `_`, `.`, `-` (an identifier, an enum value, a word): the
    value of `signature: nixl_compat_ok`, never a generated token."""
    return bool(_PLAIN_WORD.fullmatch(value.strip().strip("\"'")))


def is_ordinary(value: str) -> bool:
    """A value that is never a secret whatever its name: booleans, small numbers, references
    to other variables, placeholders."""
    v = value.strip().strip("\"'")
    if v.lower() in ORDINARY_VALUES or v.startswith("<redacted"):
        return True
    if re.fullmatch(r"-?\d{1,5}(?:\.\d+)?", v):
        return True
    return bool(re.fullmatch(r"\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\{\{.*\}\}|%\(.*\)s", v))


_NAME = r"[A-Za-z_][A-Za-z0-9_.\-]{0,127}"
_VALUE = r"[^\s\"'\\,;}{\]\[<>]{3,}"
# --name value / --name=value / NAME=value / NAME: value / "NAME": "value" / 'NAME' => 'value'
# The name and operator are searched first, the value matched only after a secret's name: a
# search that also ran the (unbounded) value after every name was quadratic on `a:a:a:...`.
_ASSIGN = re.compile(
    rf"(?<![A-Za-z0-9_])(?P<dash>--?)?(?P<q1>[\"']?)(?P<name>{_NAME})(?P=q1)"
    rf"(?:(?P<op>\s*(?:=>|:=|=|:)\s*)|(?P<sp>[ \t]+))(?P<q2>[\"']?)"
)
_ASSIGN_VALUE = re.compile(rf"(?P<value>{_VALUE})")


def _quoted_end(text: str, start: int, quote: str) -> int:
    """End of a quoted value that began at `start` (spaces and `;` included), within its line."""
    nl = text.find("\n", start)
    return text.find(quote, start, len(text) if nl < 0 else nl)  # within the line only


def assignments(text: str) -> Iterator[Span]:
    pos = 0
    while True:
        m = _ASSIGN.search(text, pos)
        if m is None:
            return
        pos = m.end("name")  # a name that is not a secret's must not hide the next one
        if not is_secret_name(m.group("name")):
            continue
        if m.group("sp") is not None and not m.group("dash"):
            continue  # `token abc` in prose: only --token abc is an assignment without = or :
        mv = _ASSIGN_VALUE.match(text, m.end())
        if mv is None:
            continue
        value = mv.group("value")
        if is_ordinary(value):
            continue
        if is_weak_secret_name(m.group("name")) and looks_like_plain_word(value):
            continue  # `signature: nixl_compat_ok`: a word, not a secret
        start, end = mv.start("value"), mv.end("value")
        if m.group("q2"):  # "my secret; pass": the value runs to its closing quote
            q = _quoted_end(text, start, m.group("q2"))
            end = q if q > 0 else end
        elif (m.group("op") or "").strip() == ":" and not m.group("q1"):
            # YAML / prose `password: two words`: to the end of the line (a comment kept)
            nl = text.find("\n", start)
            line_end = len(text) if nl < 0 else nl
            rest = text[start:line_end]
            cut = rest.find(" #")
            end = start + len((rest if cut < 0 else rest[:cut]).rstrip())
        pos = max(mv.end(), end)  # past the span: each line scanned once (linear)
        yield Span(start, end, "secret")


# --- provider tokens and headers (our own rules, beside detect-secrets') ----------------------

_OWN: tuple[tuple[str, tuple[str, ...], re.Pattern[str], int], ...] = (
    # (kind, needles: one must be in the lower-cased text for the regex to run, regex, group)
    ("hf_token", ("hf_",), re.compile(r"\bhf_[A-Za-z0-9]{20,}"), 0),
    ("openai_key", ("sk-",), re.compile(r"\bsk-(?:proj-|ant-(?:api\d\d-)?|svcacct-)?[A-Za-z0-9_\-]{16,}"), 0),
    ("gcp_key", ("aiza",), re.compile(r"\bAIza[0-9A-Za-z_\-]{30,}"), 0),
    ("gcp_key", ("ya29.",), re.compile(r"\bya29\.[0-9A-Za-z_\-.]{20,}"), 0),
    (
        "aws_access_key",
        ("akia", "asia", "a3t", "abia", "acca"),
        re.compile(r"\b(?:A3T[A-Z0-9]|ABIA|ACCA|AKIA|ASIA)[0-9A-Z]{16}\b"),
        0,
    ),
    (
        "azure_key",
        ("accountkey", "sharedaccess"),
        re.compile(
            r"(?i)\b(?:AccountKey|SharedAccessKey|SharedAccessSignature)\s*=\s*"
            r"([^;\s\"'\\]{8,})"
        ),
        1,
    ),
    ("azure_key", ("sig=",), re.compile(r"(?i)[?&]sig=([A-Za-z0-9%+/=]{16,})"), 1),
    (
        "github_token",
        ("gh", "github_pat_"),
        re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,})"),
        0,
    ),
    (
        "gitlab_token",
        ("gl",),
        re.compile(r"\bgl(?:pat|dt|ft|soat|rt|cbt|imt|ptt|agent|oas)-[A-Za-z0-9_\-]{16,}"),
        0,
    ),
    ("slack_token", ("xox",), re.compile(r"\bxox[abposr]-[A-Za-z0-9\-]{10,}"), 0),
    ("stripe_key", ("_live_", "_test_"), re.compile(r"\b(?:sk|rk|pk)_(?:live|test)_[0-9A-Za-z]{16,}"), 0),
    ("jwt", ("eyj",), re.compile(r"\beyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*"), 0),
    (
        "authorization",
        ("authorization",),
        re.compile(
            r"(?i)\b(?:authorization|proxy-authorization)[\"']?\s*[:=]\s*[\"']?"
            r"(?:(?:basic|bearer|token|digest|negotiate|aws4-hmac-sha256|apikey)\s+)?"
            r"([^\s\"'\\]{6,}(?:[ \t][^\s\"'\\]{6,})*)"
        ),
        1,
    ),
    (
        "authorization",
        ("bearer", "basic"),
        re.compile(r"(?i)\b(?:bearer|basic)\s+([A-Za-z0-9_\-.=~+/]{8,})"),
        1,
    ),
    (
        "authorization",
        ("api-key", "x-auth-token", "cookie"),
        re.compile(
            r"(?i)\b(?:x-api-key|api-key|x-auth-token|cookie|set-cookie)"
            r"[\"']?\s*:\s*[\"']?([^\s\"'\\][^\"'\\\n]{5,})"
        ),
        1,
    ),
    # scheme://user:pass@host, scheme://:pass@host (empty user), scheme://token@host
    (
        "url_credentials",
        ("://",),
        # the user part has no ':' (linear; `[^@]*:` backtracked quadratically on `a:a:a:...`)
        re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://([^\s/@:\"'\\<>]*:[^\s/@\"'\\<>]+)@"),
        1,
    ),
    ("url_credentials", ("://",), re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://([^\s/@:\"'\\<>]{16,})@"), 1),
    (
        "url_credentials",
        ("=",),
        re.compile(
            r"(?i)[?&;][A-Za-z0-9_.\-]*(?:token|api_key|apikey|key|password|passwd|secret|signature|sig|"
            r"credential|auth|session)[A-Za-z0-9_.\-]*=([^&\s\"'\\#]{4,})"
        ),
        1,
    ),
)


def own_tokens(text: str) -> Iterator[Span]:
    low = text.lower()
    for kind, needles, rx, grp in _OWN:
        if not any(n in low for n in needles):
            continue  # a plain scan for the needle is far cheaper than the regex
        for m in rx.finditer(text):
            if m.start(grp) >= 0 and m.end(grp) > m.start(grp):
                yield Span(m.start(grp), m.end(grp), kind)


# --- detect-secrets' plugins -------------------------------------------------------------------

_PLUGINS: tuple[tuple[str, str, str], ...] = (
    ("aws", "AWSKeyDetector", "aws_access_key"),
    ("azure_storage_key", "AzureStorageKeyDetector", "azure_key"),
    ("basic_auth", "BasicAuthDetector", "url_credentials"),
    ("github_token", "GitHubTokenDetector", "github_token"),
    ("gitlab_token", "GitLabTokenDetector", "gitlab_token"),
    ("jwt", "JwtTokenDetector", "jwt"),
    ("slack", "SlackDetector", "slack_token"),
    ("stripe", "StripeDetector", "stripe_key"),
    ("openai", "OpenAIDetector", "openai_key"),
    ("discord", "DiscordBotTokenDetector", "api_token"),
    ("npm", "NpmDetector", "api_token"),
    ("pypi_token", "PypiTokenDetector", "api_token"),
    ("sendgrid", "SendGridDetector", "api_token"),
    ("twilio", "TwilioKeyDetector", "api_token"),
    ("mailchimp", "MailchimpDetector", "api_token"),
    ("artifactory", "ArtifactoryDetector", "api_token"),
    ("square_oauth", "SquareOAuthDetector", "api_token"),
    ("telegram_token", "TelegramBotTokenDetector", "api_token"),
)


@lru_cache(maxsize=1)
def _plugins() -> tuple[tuple[str, Any], ...]:
    """detect-secrets' regex plugins, instantiated once (none needs settings or network to
    analyse a string)."""
    import importlib

    out: list[tuple[str, Any]] = []
    for module, cls, kind in _PLUGINS:
        try:
            mod = importlib.import_module(f"detect_secrets.plugins.{module}")
            out.append((kind, getattr(mod, cls)()))
        except (ImportError, AttributeError, TypeError):  # pragma: no cover - plugin renamed
            continue
    return tuple(out)


def detect_secrets_spans(text: str) -> Iterator[Span]:
    """Spans of what detect-secrets' plugins find, each extended over the token it starts."""
    for kind, plugin in _plugins():
        found = {v.strip() for v in plugin.analyze_string(text) if v and v.strip()}
        for value in found:
            pos = text.find(value)
            while pos >= 0:
                end = pos + len(value)
                tail = _TOKEN_TAIL.match(text, end)
                if tail is not None:
                    end = tail.end()
                yield Span(pos, end, kind)
                pos = text.find(value, end)


# --- private keys --------------------------------------------------------------------------------

_BEGIN = re.compile(r"-----BEGIN[A-Z0-9 ]*(?:PRIVATE KEY|PRIVATE KEY BLOCK)-----")
_END = re.compile(r"-----END[A-Z0-9 ]*(?:PRIVATE KEY|PRIVATE KEY BLOCK)-----")
_PUTTY = re.compile(r"PuTTY-User-Key-File-\d:")
_PUTTY_MAC = re.compile(r"Private-MAC:[^\n]*")
_B64_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


def _ends_in_b64(line: str) -> bool:
    """`line` ends in 16+ base64 characters (then up to two `=`, blanks): a prefixed body line.
    Counted from the end (linear; a regex with a leading `.*` was quadratic on a long line)."""
    s = line.rstrip(" \t")
    body = s.rstrip("=")
    if len(s) - len(body) > 2:
        return False
    for n, ch in enumerate(reversed(body), 1):
        if ch not in _B64_CHARS:
            return False
        if n >= 16:
            return True
    return False


_B64_LINE = re.compile(r"(?m)^[ \t>|]*(?:[A-Za-z0-9+/]{40,}={0,2}|[A-Za-z0-9+/]{4,}={1,2})[ \t]*$")
_PEM_HEADER_LINE = re.compile(r"(?m)^[ \t]*(?:Proc-Type|DEK-Info|Comment|Version):[^\n]*$")


def private_keys(text: str) -> Iterator[Span]:
    pos = 0
    ends = list(_END.finditer(text))
    used_end = -1
    j = 0
    for b in _BEGIN.finditer(text):
        if b.start() < pos:
            continue
        while j < len(ends) and ends[j].start() <= b.end():
            j += 1
        e = ends[j] if j < len(ends) else None
        stop = e.end() if e is not None else len(text)
        if e is not None:
            used_end = max(used_end, e.end())
        yield Span(b.start(), stop, "private_key")
        pos = stop
    for e in ends:
        if e.end() <= used_end:
            continue
        # an END without its BEGIN (an excerpt cut inside the block): back over the body
        keep = text.rfind("\n", 0, e.start()) + 1  # start of the END's line
        while keep > 0:
            prev = text.rfind("\n", 0, keep - 1) + 1
            line = text[prev : keep - 1]
            if _B64_LINE.fullmatch(line) or _PEM_HEADER_LINE.fullmatch(line) or not line.strip():
                keep = prev
                continue
            if _ends_in_b64(line):  # a prefixed body line
                keep = prev
            break
        yield Span(keep, e.end(), "private_key")
    pos = 0
    for h in _PUTTY.finditer(text):  # header to the next Private-MAC line (linear)
        if h.start() < pos:
            continue
        mac = _PUTTY_MAC.search(text, h.end())
        if mac is None:
            break
        yield Span(h.start(), mac.end(), "private_key")
        pos = mac.end()
    body_lines = [m for m in _B64_LINE.finditer(text) if len(m.group(0).strip()) >= 40 or _near_b64(text, m)]
    for m in body_lines:
        if _entropy(m.group(0).strip(" \t>|")) >= 4.0:
            yield Span(m.start(), m.end(), "private_key")


def _near_b64(text: str, m: re.Match[str]) -> bool:
    """A short base64 line right after a long one (the last line of a PEM body)."""
    end = m.start() - 1
    before = text[text.rfind("\n", 0, max(end, 0)) + 1 : max(end, 0)]
    return bool(re.fullmatch(r"[ \t>|]*[A-Za-z0-9+/]{40,}[ \t]*", before))


# --- high-entropy tokens -----------------------------------------------------------------------

_B64_TOKEN = re.compile(r"(?<![A-Za-z0-9+/=_\-.~%\\])[A-Za-z0-9+/_\-]{24,}={0,2}(?![A-Za-z0-9+/=_\-])")


def _entropy(s: str) -> float:
    if not s:
        return 0.0
    n = len(s)
    return -sum(c / n * math.log2(c / n) for c in Counter(s).values())


def high_entropy(text: str) -> Iterator[Span]:
    for m in _B64_TOKEN.finditer(text):
        tok = m.group(0)
        if tok.startswith("/") or not (
            any(c.isdigit() for c in tok) and any(c.isupper() for c in tok) and any(c.islower() for c in tok)
        ):
            continue
        if re.fullmatch(r"[0-9a-fA-F\-]+", tok):
            continue  # hex: hashes and ids (see the module docstring)
        floor = min(4.3, math.log2(len(tok)) - 0.75)
        if _entropy(tok) >= floor:
            yield Span(m.start(), m.end(), "high_entropy")
