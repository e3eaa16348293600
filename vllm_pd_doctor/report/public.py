"""The public bundle's text, by construction: every word kept is of a kind known to be safe.

The second line (`redact.Redactor`) replaces what it recognises (secrets, hosts, addresses, user
names) with stable placeholders. `SafeText` then reads what is left word by word and keeps a
word only when its shape is known to be safe: numbers and versions, identifiers and words,
flags, file names with a known extension, Python dotted paths and attribute chains, paths inside
a Python installation (`site-packages/vllm/...`, the standard library), public URLs and the
placeholders themselves. Every other word (a token, a path of the user's, a name with many
digits, a URL-encoded value, an address) becomes a stable placeholder (`<value-3>`, `<path-2>`,
`<host-1>`): the same value gets the same placeholder everywhere in one bundle, so a
maintainer can still follow a request id or a host through the evidence.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

from vllm_pd_doctor.knowledge.facts import connectors
from vllm_pd_doctor.report.redact.hosts import (
    CODE_ROOTS,
    EXTENSIONS,
    PUBLIC_HOSTS,
    is_tld,
    valid_ipv4_loose,
)

PLACEHOLDER_RX = re.compile(r"<[a-z_]+-\d+>|<redacted:[a-z_]+>")


@dataclass
class Placeholders:
    """Same (kind, value), same placeholder, within one bundle: `<host-1>`, `<secret-2>`."""

    _map: dict[tuple[str, str], str] = field(default_factory=dict)
    _count: Counter[str] = field(default_factory=Counter)

    def get(self, kind: str, value: str) -> str:
        key = (kind, value)
        ph = self._map.get(key)
        if ph is None:
            self._count[kind] += 1
            ph = self._map[key] = f"<{kind}-{self._count[kind]}>"
        return ph

    def counts(self) -> dict[str, int]:
        return dict(sorted(self._count.items()))


# a "word": a run without spaces, quotes, brackets and the separators of key=value, a: b, a,b
_PH = r"<[a-z_]+-\d+>"
_REFS = re.compile(r"(?<![\w/])(?:[A-Za-z][\w.-]*)?#\d+(?:/(?:[A-Za-z][\w.-]*)?#\d+)+(?![\w/])")
"""Issue/PR references joined by slashes (`#56089/#46304`, `vllm#1/vllm#2`): words, not a path."""
_WORD = re.compile(rf"(?:{_PH}|[^\s\"'`()\[\]{{}}<>,;=|:!?*&$#^])+")
_URL = re.compile(rf"\b([A-Za-z][A-Za-z0-9+.\-]{{0,15}})://((?:{_PH}|[^\s\"'`<>()\[\]{{}},|\\])*)")
_NUMBER = re.compile(r"[+\-]?(?:\d+(?:\.\d+){0,2}(?:[eE][+\-]?\d+)?[A-Za-z%]{0,3}|0x[0-9A-Fa-f]{1,16}|\.\d+)")
_VERSION = re.compile(
    r"v?\d+(?:\.\d+){1,3}(?:(?:a|b|rc|post|dev)\d*)?(?:\.(?:post|dev)\d+)?(?:\+[A-Za-z0-9.]{1,24})?"
)
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_TIMESTAMP = re.compile(
    r"(?:\d{4}-\d{2}-\d{2}|\d{2}-\d{2}|\d{4}/\d{2}/\d{2})(?:[T_]\d{2}(?:\.\d+)?)?(?:Z|[+\-]\d{2})?"
)
"""A date, or the part of an ISO timestamp before its first colon (`2026-11-30T22`): a maintainer
reads when things happened; the rest (`:58:12.123Z`) is numbers already."""
_PARTS = re.compile(r"[A-Za-z0-9_]+(?:[\-.][A-Za-z0-9_]+)*")
_SAFE_ROOTS = (
    "/usr/lib/",
    "/usr/local/lib/",
    "/usr/bin/",
    "/usr/local/bin/",
    "/usr/include/",
    "/dev/",
    "/proc/",
)
_PY_LIB = re.compile(r".*?/lib(?:64)?/(python\d(?:\.\d+)?)/(.*)")


def _digit_runs(s: str) -> int:
    return len(re.findall(r"\d+", s))


def ident_ok(word: str) -> bool:
    """A word or identifier (`num_new_tokens`, `EngineCore`, `bfloat16`, `float8_e4m3fn`), not a
    generated token (`aB3dE5fG7h`, 40 hex digits)."""
    if len(word) > 64 or not _IDENT.fullmatch(word):
        return False
    parts = [p for p in word.split("_") if p]
    if any(_digit_runs(p) > 2 for p in parts):
        return False
    if re.fullmatch(r"[0-9a-fA-F]{20,}", word.strip("_")):
        return False
    mixed = (
        any(c.isupper() for c in word) and any(c.islower() for c in word) and any(c.isdigit() for c in word)
    )
    return not (mixed and len(word) >= 20)


def _hyphenated_ok(word: str) -> bool:
    """`kv-transfer-config`, `non-default`, `x86-64`, `utf-8`: parts that are words, few digits."""
    parts = word.split("-")
    if not all((p and _IDENT.fullmatch(p)) or p.isdigit() for p in parts):
        return False
    return _digit_runs(word) <= 2 and all(ident_ok(p) for p in parts if not p.isdigit())


def _dotted_kind(word: str) -> str | None:
    """'file', 'code' (a Python path or an attribute chain), 'host', or None."""
    labels = word.split(".")
    if any(not lab for lab in labels):
        return None
    last = labels[-1].lower()
    if last in EXTENSIONS and all(_IDENT.fullmatch(x) or _hyphenated_ok(x) for x in labels[:-1]):
        return "file"
    if all(re.fullmatch(r"[A-Za-z0-9\-]+", x) for x in labels) and is_tld(labels[-1]):
        if labels[0] in CODE_ROOTS and len(labels) == 2 and len(last) == 2:
            return "code"  # torch.nn
        return "host"
    if all(ident_ok(x) for x in labels):
        return "code"  # vllm.v1.core.sched, err.response, self.kv_cache_config
    return None


@dataclass
class SafeText:
    """Keeps the words of known-safe kinds, replaces every other with a stable placeholder."""

    ph: Placeholders = field(default_factory=Placeholders)
    keep_hosts: bool = False
    """--no-redact-hosts: host names and addresses are kept as written."""
    keep: frozenset[str] = frozenset()
    """Words known to be public (model ids resolvable on the Hugging Face Hub, bundled families)."""
    rename: dict[str, str] = field(default_factory=dict)
    """Words shown in another form: an input file's name (or path) -> its public name."""

    def text(self, s: str) -> str:
        out: list[str] = []
        pos = 0
        for m in _URL.finditer(s):
            out.append(self._words(s[pos : m.start()]))
            out.append(self._url(m.group(1), m.group(2)))
            pos = m.end()
        out.append(self._words(s[pos:]))
        return "".join(out)

    def _url(self, scheme: str, rest: str) -> str:
        host, slash, path = rest.partition("/")
        hostname, colon, port = host.rpartition(":") if host.count(":") == 1 else (host, "", "")
        if "@" in hostname:
            hostname = hostname.rpartition("@")[2]
            info = host.rpartition("@")[0]
            at = (info if PLACEHOLDER_RX.fullmatch(info) else self.ph.get("secret", info)) + "@"
        else:
            at = ""
        if hostname.lower() in PUBLIC_HOSTS or (self.keep_hosts and hostname):
            return f"{scheme}://{at}{host}{slash}{self._path_tail(path) if at else path}"
        if PLACEHOLDER_RX.fullmatch(hostname) or hostname in ("localhost", "127.0.0.1", "0.0.0.0"):
            shown = hostname
        else:
            shown = self.ph.get("host", hostname) if hostname else ""
        port = port if port.isdigit() else (self.ph.get("value", port) if port else "")
        tail = ("/" + self.ph.get("path", path)) if path else slash
        return f"{scheme}://{at}{shown}{colon}{port}{tail}"

    def _path_tail(self, path: str) -> str:
        return self.ph.get("path", path) if path else ""

    def _words(self, s: str) -> str:
        out: list[str] = []
        pos = 0
        for r in _REFS.finditer(s):  # `#56089/#46304`, `vllm#1/vllm#2`: references, kept whole
            out.append(self._plain_words(s[pos : r.start()]))
            out.append(r.group(0))
            pos = r.end()
        out.append(self._plain_words(s[pos:]))
        return "".join(out)

    def _plain_words(self, s: str) -> str:
        out: list[str] = []
        pos = 0
        for m in _WORD.finditer(s):
            out.append(s[pos : m.start()])
            out.append(self.word(m.group(0)))
            pos = m.end()
        out.append(s[pos:])
        return "".join(out)

    def word(self, w: str) -> str:
        core = w.rstrip(".")
        dots = w[len(core) :]
        if not core:
            return w
        return self._classify(core) + dots

    def _classify(self, w: str) -> str:
        if PLACEHOLDER_RX.fullmatch(w) or w in ("~", "-", "--", "...", "->", "=>", "/", "\\", "%"):
            return w
        if "<" in w:  # decode-<host-1>.log, /gpfs/home/<user-2>/env/...: judged around the placeholders
            plain = PLACEHOLDER_RX.sub("x", w)
            if "/" not in plain and "\\" not in plain:
                return w if self._classify(plain) == plain else self.ph.get("value", w)
            return self._path(w)
        if w in self.rename:
            return self.rename[w]
        if w in self.keep:
            return w  # a public model id (the Hub, or a family pd-doctor bundles)
        if _TIMESTAMP.fullmatch(w) and _real_date(w):
            return w
        if valid_ipv4_loose(w):
            return w if w in ("127.0.0.1", "0.0.0.0") or self.keep_hosts else self.ph.get("ip", w)
        if _NUMBER.fullmatch(w) or _VERSION.fullmatch(w):
            # an account number, a phone number, a card: 11+ digits in a row are an id
            return self.ph.get("id", w) if re.search(r"\d{11}", w) else w
        if ident_ok(w) or self._flag_ok(w):
            return w
        if "/" in w or "\\" in w:
            return self._path(w)
        if "@" in w:
            return self.ph.get("email" if "." in w.rpartition("@")[2] else "value", w)
        if re.fullmatch(r"[0-9a-fA-F\-]{8,}", w) and _digit_runs(w) > 0:
            return self.ph.get("id", w)  # hashes, request ids: followable, never shown
        if self._versioned(w):
            return w  # Linux-6.8.0-x86_64-with-glibc2.35, cuda-12.4, nixl-cu12
        if _PARTS.fullmatch(w):
            if "." in w:
                kind = _dotted_kind(w)
                if kind in ("file", "code"):
                    return w
                if kind == "host":
                    return w if self.keep_hosts else self.ph.get("host", w)
            elif _hyphenated_ok(w):
                return w
        return self.ph.get("value", w)

    @staticmethod
    def _versioned(w: str) -> bool:
        """A hyphenated name whose parts are words and dotted versions (a platform string)."""
        parts = w.split("-")
        return (
            not re.search(r"\d+\.\d+\.\d+\.\d+", w)
            and 2 <= len(parts) <= 8
            and any("." in p for p in parts)
            and all(
                ident_ok(p) or _VERSION.fullmatch(p) or re.fullmatch(r"[A-Za-z]+\d*(?:\.\d+)+", p)
                for p in parts
            )
            and sum(1 for p in parts if p.isdigit()) <= 1
        )

    @staticmethod
    def _flag_ok(w: str) -> bool:
        """`--enable-prefix-caching`, `--kv-transfer-config.kv_role`, `-tp`, `-O3`; not a value
        glued to a short flag (`-pS3cretPw`)."""
        if w.startswith("--"):
            return bool(re.fullmatch(r"--[a-z0-9][a-z0-9\-_.]*", w)) and all(
                ident_ok(p) for p in re.split(r"[\-_.]", w[2:]) if p and not p.isdigit()
            )
        return bool(re.fullmatch(r"-[A-Za-z][A-Za-z0-9]{0,3}", w))

    def _path(self, w: str) -> str:
        """Paths: inside a Python installation kept from the package on, system paths kept, a
        package-relative path (`vllm/v1/core/...`) kept; any other path is a placeholder."""
        if re.fullmatch(r"[A-Za-z][A-Za-z_]{0,4}(?:/[A-Za-z][A-Za-z_]{0,4}){1,2}", w):
            return w  # P/D, I/O, rc/dc, TP/PP: words, not a place
        p = w.replace("\\\\", "\\")
        for marker in ("site-packages/", "dist-packages/"):
            i = p.find(marker)
            if i >= 0:
                rest = p[i + len(marker) :]
                if self._plain_path(rest):
                    return f"<{marker[:-1]}>/{rest}"
                return self.ph.get("path", w)
        m = _PY_LIB.fullmatch(p)
        if m and self._plain_path(m.group(2)):
            return f"<python>/lib/{m.group(1)}/{m.group(2)}"
        if p.startswith(_SAFE_ROOTS) and self._plain_path(p.split("/", 3)[-1]) and "home" not in p:
            return w
        first = p.split("/")[0]
        if first in CODE_ROOTS and "\\" not in p and self._plain_path(p):
            return w  # vllm/v1/core/sched/scheduler.py
        tail = _package_tail(p)
        if tail is not None:  # /app/vllm/vllm/v1/engine/core.py: a source checkout's frame
            return f"<src>/{tail}"
        return self.ph.get("path", w)

    @staticmethod
    def _plain_path(rest: str) -> bool:
        parts = [x for x in rest.split("/") if x]
        return bool(parts) and all(
            _IDENT.fullmatch(x)
            or _hyphenated_ok(x)
            or _dotted_kind(x) in ("file", "code")
            or _VERSION.fullmatch(x)
            or re.fullmatch(r"[A-Za-z0-9_.\-]+\.(?:dist|egg)-info", x)
            for x in parts
        )


_FRAME_ROOTS = ("vllm", *connectors.TRANSFER_PACKAGES, "torch", "transformers", "ray", "triton", "flashinfer")
"""Packages whose source files a traceback names wherever they are installed from (a checkout,
an editable install): the path from the package on is the package's own public file."""


def _package_tail(p: str) -> str | None:
    """`vllm/v1/engine/core.py` out of `/app/src/vllm/vllm/v1/engine/core.py` (the first package
    root followed by a plain Python file path), else None."""
    if not p.endswith(".py") or "\\" in p:
        return None
    parts = p.split("/")
    for i in range(len(parts) - 1):  # the first root that is not a checkout's folder (vllm/vllm/...)
        if parts[i] in _FRAME_ROOTS and parts[i + 1] != parts[i]:
            tail = "/".join(parts[i:])  # package/subpackage/file.py at least: a module of it
            return tail if len(parts) - i >= 3 and SafeText._plain_path(tail) else None
    return None


def _real_date(w: str) -> bool:
    """Month 01-12 and day 01-31 where the word holds them (an id such as 9876-5432 is not a date)."""
    nums = [int(x) for x in re.findall(r"\d+", w)]
    if len(w) >= 10 and w[4] in "-/":
        month, day = nums[1], nums[2]
    else:
        month, day = nums[0], nums[1]
    return 1 <= month <= 12 and 1 <= day <= 31


_NAME_WORDS = frozenset(
    """prefill decode encoder encode proxy router pd xpyd disagg disaggregated vllm serve engine core api
    log logs stdout stderr out err output crash error errors debug trace config configs values deploy
    deployment manifest manifests k8s helm chart compose docker script run launch start slurm sbatch
    nixl lmcache mooncake connector kv cache test example bench benchmark repro report bundle yaml yml
    json sh txt md toml cfg ini env hybrid dense moe mamba multi""".split()  # noqa: SIM905
)
"""Words a file name may keep in a public bundle: roles and kinds of files in pd-doctor's and vLLM's
own vocabulary, none a word machines are named with (node, gpu, worker, rank, pod). A file name is
public text too (a host or a cluster can be named only there), so every other word of it becomes
a placeholder, whatever its shape."""


def public_file_name(name: str, ph: Placeholders) -> str:
    """`decode-<name-1>.log` for `decode-gpu-node-17.log`: the separators, numbers and known words
    kept, every other run a stable placeholder (same run, same placeholder)."""
    out: list[str] = []
    for part in re.split(r"([\-_.@ +~,=]+)", name):
        separator = not part or re.fullmatch(r"[\-_.@ +~,=]+", part)
        if separator or (part.isdigit() and len(part) <= 4) or part.lower() in _NAME_WORDS:
            out.append(part)
        else:
            out.append(ph.get("name", part))
    return "".join(out)
