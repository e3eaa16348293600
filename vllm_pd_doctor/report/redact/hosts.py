"""Host names, IP addresses, e-mail addresses and home directories in free text.

Host names are found three ways: any fully qualified name (no list of top-level domains: a
name of 2+ labels whose last label is alphabetic, minus Python module paths and file names),
the host names named anywhere in the input (commands, config, environment, URLs; short names
included) and this machine's own names. Loopback stays recognisable (127.0.0.1, ::1, localhost).
"""

from __future__ import annotations

import ipaddress
import re
import socket
from collections.abc import Iterable, Iterator
from contextlib import suppress
from functools import lru_cache

from vllm_pd_doctor.report.redact.rules import Span

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost", "ip6-loopback"})
PUBLIC_HOSTS = frozenset(
    {
        "github.com",
        "huggingface.co",
        "pypi.org",
        "docs.vllm.ai",
        "vllm.ai",
        "blog.vllm.ai",
        "download.pytorch.org",
        "files.pythonhosted.org",
        "docs.python.org",
        "docs.nvidia.com",
        "developer.nvidia.com",
        "errors.pydantic.dev",
        "raw.githubusercontent.com",
        "hf.co",
    }
)
"""Public hosts pd-doctor itself names in a report (left as they are)."""


def _words(text: str) -> frozenset[str]:
    return frozenset(text.split())


# File extensions and code roots that make a dotted name a file or a Python path, not a host.
EXTENSIONS = _words("""
py pyc pyi pyx pxd so dll dylib a o h hpp c cc cpp cu cuh json jsonl yaml yml toml ini cfg conf
txt log md rst html htm xml csv tsv sh bash zsh zip gz tgz tar bz2 xz zst whl egg lock pid pt
pth bin safetensors gguf onnx pkl pickle npy npz ckpt index tmp bak swp out err png jpg jpeg
svg gif pdf ipynb env service socket sock cache db sqlite proto pb js ts css map rs go java kt
""")
CODE_ROOTS = _words("""
vllm vllm_pd_doctor vllm_pd_doctor_target torch transformers nixl nixl_cu12 triton numpy np os
sys self cls json logging asyncio concurrent multiprocessing threading typing collections
importlib pydantic fastapi uvicorn starlette zmq msgspec ray huggingface_hub safetensors
tokenizers subprocess socket pathlib args kwargs config model engine request req scheduler ctx
e re math functools itertools dataclasses enum abc io tempfile shutil signal time datetime uuid
random pytest typer rich httpx psutil yaml setuptools pip uv cuda nccl ucx gloo tensorrt
flashinfer xformers mamba outlines xgrammar prometheus_client openai anthropic aiohttp requests
urllib http email mistral_common sentencepiece tiktoken accelerate peft deepspeed apex
""")
STOP_WORDS = _words("""
prefill decode proxy router server client host hostname node worker master head main default
none null true false any all cpu gpu cuda vllm nixl localhost local remote engine api primary
secondary backend frontend service app test dev prod staging
""")

_LABEL = r"[A-Za-z0-9](?:[A-Za-z0-9\-]{0,61}[A-Za-z0-9])?"
_FQDN = re.compile(rf"(?<![A-Za-z0-9_\-.%])((?:{_LABEL}\.)+{_LABEL})(?![A-Za-z0-9_\-]|\.[A-Za-z0-9])")
_EMAIL = re.compile(
    rf"(?<![A-Za-z0-9._%+\-])[A-Za-z0-9._%+\-]+(?:@|%40|%2540)((?:{_LABEL}\.)+[A-Za-z]{{2,24}})\b",
    re.IGNORECASE,
)
_IPV4 = re.compile(r"(?<![\d.])(?<![A-Za-z])(\d{1,4}(?:\.\d{1,4}){3})(?!\d|\.\d)")
_IPV6 = re.compile(
    r"(?<![0-9A-Za-z:.])([0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){1,6}:(?:\d{1,3}(?:\.\d{1,3}){3})"
    r"|[0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7})(?:%[A-Za-z0-9]+)?(?![0-9A-Za-z:.])"
)
_HOME = re.compile(
    r"(?<![A-Za-z0-9_.\-])((?:/[A-Za-z0-9_.\-]+)?/home\d*|/Users|/u|/export/home|/scratch"
    r"|[A-Za-z]:\\+(?:Users|home)|%2F(?:home|Users))(?:/|\\+|%2F)([^/\s\"'<>:;,\\%]+)",
    re.IGNORECASE,
)
_TORCHINDUCTOR = re.compile(r"torchinductor_([A-Za-z0-9_.\-]+)")
_URL_HOST = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://(?:[^\s/@]*@)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-_]+)")
_HOST_NAME = (
    r"(?:[A-Za-z_\-]*host(?:name)?s?|[A-Za-z_\-]*_ip|[A-Za-z_\-]*addr(?:ess)?|"
    r"[A-Za-z_\-]*(?:master|server|node|endpoint|head|comm_id|bastion|gateway)(?:[_\-]?name)?)"
)
_HOST_FLAG = re.compile(
    rf"(?i)(?:--{_HOST_NAME}(?:=|\s+)|\b{_HOST_NAME}[\"']?\s*[=:]\s*)[\"']?"
    r"(?![A-Za-z][A-Za-z0-9+.\-]*://)([A-Za-z0-9][A-Za-z0-9.\-_]*)"
)
_SSH_CMD = re.compile(
    r"\b(?:ssh|scp|rsync|mosh|sftp)\s+(?:-[A-Za-z]+(?:\s+(?!-)\S+)?\s+)*"
    r"(?:[A-Za-z_][A-Za-z0-9_\-]*@)?([A-Za-z0-9][A-Za-z0-9.\-]*[A-Za-z0-9])(?=[\s:]|$)"
)
_NETRC = re.compile(r"(?m)\bmachine\s+([A-Za-z0-9][A-Za-z0-9.\-]*)")
_HOST_PORT = re.compile(
    r"(?<![A-Za-z0-9_.\-/@:\[%])([A-Za-z][A-Za-z0-9\-]*\d[A-Za-z0-9\-]*):\d{2,5}(?![:\w.])"
)
_WORD_HOST_PORT = re.compile(r"(?<![A-Za-z0-9_.\-/@:\[%])([A-Za-z][A-Za-z\-]{3,62}):(\d{4,5})(?![:\w.])")
"""`cachebox:6379`: a plain-word host before a port (4-5 digits), not a counter (`tokens:8192`)."""
_NOT_HOSTS = _words("""
tokens blocks block steps step rank size port len time seq batch epoch iter line lines total
count index ids http https tcp udp grpc unix file
""")
_SSH = re.compile(rf"\b[a-z_][a-z0-9_\-]*@({_LABEL}(?:\.{_LABEL})*)")


TLDS = _words("""
com net org edu gov mil int io ai dev app cloud co biz info me tech site online xyz top pro name
local internal lan corp home intranet private localdomain cluster svc pod test example invalid
arpa lab hpc priv prod stage staging mesh consul k8s kube
""")
"""Top-level labels that make a dotted name a host (beside every two-letter country code)."""


def is_tld(label: str) -> bool:
    low = label.lower()
    return low in TLDS or (len(low) == 2 and low.isalpha() and low.isascii())


def valid_ipv4_loose(text: str) -> bool:
    """Four dotted decimal parts (zero-padded ones too: 010.001.002.003)."""
    parts = text.split(".")
    return len(parts) == 4 and all(
        p.isdigit() and p.isascii() and 1 <= len(p) <= 4 and int(p) <= 255 for p in parts
    )


def valid_ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


def valid_ipv6(text: str) -> bool:
    if text.count(":") < 2:
        return False
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _keep_ip(text: str) -> bool:
    if valid_ipv4_loose(text):
        text = ".".join(str(int(p)) for p in text.split("."))
    ip = ipaddress.ip_address(text.split("%")[0])
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback or ip.is_unspecified


def fqdn_end(name: str) -> int:
    """Length of the host part of a dotted name, or 0 when it does not look like a host: the
    last label must be a top-level label (`is_tld`); a file name (last label an extension), a
    Python path or attribute chain (`vllm.v1.core.sched`, `err.response`) is no host. Earlier
    labels may be anything (`vllm.corp.example.com`, `gpu.sh.example.com`), in any case."""
    labels = name.split(".")
    if len(labels) < 2 or not all(labels):
        return 0
    while len(labels) > 2 and labels[-1].lower() in EXTENSIONS:
        labels.pop()  # prefill-gpu-7.corp.example.com.log: the host, then the file's extension
    last = labels[-1]
    if last.lower() in EXTENSIONS or not is_tld(last) or not last.isalpha():
        return 0
    if labels[0] in CODE_ROOTS and len(labels) == 2 and len(last) == 2:
        return 0  # torch.nn, np.ma
    if all(lab.isdigit() for lab in labels[:-1]):
        return 0
    if re.search(r"[a-z]", last) and re.search(r"[A-Z]", last):
        return 0  # vllm.Config.Me: CamelCase is code
    host = ".".join(labels)
    if host.lower() in PUBLIC_HOSTS or host.lower() in LOOPBACK_NAMES:
        return 0
    return len(host)


_DOT_DOMAIN = re.compile(rf"(?<=[=,\s\"'])\.((?:{_LABEL}\.)+{_LABEL})(?![A-Za-z0-9_\-]|\.[A-Za-z0-9])")
"""`NO_PROXY=.corp.internal,...`: a domain written with its leading dot."""


def fqdns(text: str) -> Iterator[Span]:
    for m in _DOT_DOMAIN.finditer(text) if "=." in text or ",." in text or " ." in text else ():
        n = fqdn_end(m.group(1))
        if n:
            yield Span(m.start(1), m.start(1) + n, "host")
    for m in _FQDN.finditer(text):
        n = fqdn_end(m.group(1))
        if not n:
            continue
        after = text[m.end() : m.end() + 1]
        before = text[max(0, m.start() - 7) : m.start()]
        if after == "(" or before.endswith(("import ", "from ")):
            continue
        yield Span(m.start(1), m.start(1) + n, "host")


def emails(text: str) -> Iterator[Span]:
    if "@" not in text and "%40" not in text and "%2540" not in text:
        return
    for m in _EMAIL.finditer(text):
        if m.group(1).lower() in PUBLIC_HOSTS and m.group(0).split("@")[0].lower() in ("noreply", "git"):
            continue
        yield Span(m.start(), m.end(), "email")


def ips(text: str) -> Iterator[Span]:
    for needle, rx, valid in ((".", _IPV4, valid_ipv4_loose), (":", _IPV6, valid_ipv6)):
        if needle not in text:
            continue
        for m in rx.finditer(text):
            value = m.group(1)
            if valid(value) and not _keep_ip(value):
                yield Span(m.start(1), m.end(1), "ip")


def homes(text: str, home: str | None) -> Iterator[Span]:
    """Spans of the user's home path (whole) and of the user name in any /home/<user>."""
    if home:
        h = home.rstrip("/")
        if len(h) > 1:
            for m in re.finditer(re.escape(h) + r"(?![A-Za-z0-9_.\-])", text):
                yield Span(m.start(), m.end(), "home")
    low = text.lower()
    if any(n in low for n in ("home", "users", "/u/", "scratch")):
        for m in _HOME.finditer(text):
            yield Span(m.start(2), m.end(2), "user")
    if "torchinductor_" in text:
        for m in _TORCHINDUCTOR.finditer(text):
            yield Span(m.start(1), m.end(1), "user")


def known_hosts_rx(hosts: Iterable[str]) -> re.Pattern[str] | None:
    names = sorted(host_variants(hosts), key=len, reverse=True)
    if not names:
        return None
    alt = "|".join(re.escape(h) for h in names)
    return re.compile(rf"(?<![A-Za-z0-9])({alt})(?![A-Za-z0-9])", re.IGNORECASE)


def host_variants(hosts: Iterable[str]) -> set[str]:
    """The names to look for: each host, and the short name of a FQDN."""
    out: set[str] = set()
    for h in hosts:
        h = h.strip().strip(".[]")
        low = h.lower()
        if not h or low in LOOPBACK_NAMES or low in PUBLIC_HOSTS or low in STOP_WORDS:
            continue
        if valid_ipv4(h) or ":" in h or len(h) < 3 or h.replace(".", "").isdigit():
            continue
        out.add(h)
        first = h.split(".")[0]
        # the short name of gpu-node-7.example.com; never a plain word (core.windows.net must
        # not turn vllm/v1/core/sched into a host)
        if (
            "." in h
            and len(first) >= 3
            and first.lower() not in STOP_WORDS
            and first not in CODE_ROOTS
            and re.search(r"[\d\-]", first)
        ):
            out.add(first)
    return out


def hosts_in(text: str) -> set[str]:
    """Host names (not addresses) named in a command line, config or environment text."""
    found: set[str] = set()
    low = text.lower()
    for needles, rx in _GATED:
        if any(n in low for n in needles):
            found.update(m.group(1) for m in rx.finditer(text))
    for span in fqdns(text):
        found.add(text[span.start : span.end])
    for span in contexts(text):
        if span.kind == "host":
            found.add(text[span.start : span.end])
    out = set()
    for h in found:
        h = h.strip(".[]")
        if h and not valid_ipv4(h) and not valid_ipv6(h) and not h.isdigit() and h.lower() not in STOP_WORDS:
            out.add(h)
    return out


_HOST_KW_RX = r"host|_ip|addr|master|server|node|endpoint|head|comm_id|bastion|gateway"
_HOST_KW = re.compile(_HOST_KW_RX)
_HOST_KW_ANY_CASE = re.compile(_HOST_KW_RX, re.IGNORECASE)
_HOST_NAME_RX = re.compile(rf"(?i){_HOST_NAME}")
_HOST_NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz_-")
_HOST_VALUE = r"(?![A-Za-z][A-Za-z0-9+.\-]*://)([A-Za-z0-9][A-Za-z0-9.\-_]*)"
_HOST_TAIL = re.compile(rf"[\"']?\s*[=:]\s*[\"']?{_HOST_VALUE}")
_HOST_FLAG_TAIL = re.compile(rf"(?:=|\s+)[\"']?{_HOST_VALUE}")


def _host_flags(text: str) -> Iterator[re.Match[str]]:
    """`--host X`, `MASTER_ADDR=X`, `nodeName: X` (the name found from its keyword out: linear)."""
    last = -1
    low = text.lower()
    scan, rx = (low, _HOST_KW) if len(low) == len(text) else (text, _HOST_KW_ANY_CASE)
    for m in rx.finditer(scan):
        if m.start() < last:
            continue
        i, j = m.start(), m.end()
        while i > 0 and text[i - 1] in _HOST_NAME_CHARS and m.start() - i < 64:
            i -= 1
        while j < len(text) and text[j] in _HOST_NAME_CHARS and j - m.end() < 64:
            j += 1
        last = j
        name = text[i:j]
        flag = name.startswith("--")
        if not _HOST_NAME_RX.fullmatch(name.lstrip("-")):
            continue
        t = (_HOST_FLAG_TAIL if flag else _HOST_TAIL).match(text, j)
        if t is not None:
            yield t


_GATED: tuple[tuple[tuple[str, ...], re.Pattern[str]], ...] = (
    (("://",), _URL_HOST),
    (("@",), _SSH),
    (("ssh", "scp", "rsync", "mosh", "sftp"), _SSH_CMD),
    (("machine",), _NETRC),
    ((":",), _HOST_PORT),
    ((":",), _WORD_HOST_PORT),
)
"""Patterns that find a host by its context, each run only when its needle is in the text."""

_CONTEXTS: tuple[tuple[str, tuple[str, ...], re.Pattern[str]], ...] = (
    ("host", ("@",), _SSH),
    ("host", ("ssh", "scp", "rsync", "mosh", "sftp"), _SSH_CMD),
    ("host", ("machine",), _NETRC),
    ("host", (":",), _HOST_PORT),
    ("host", (":",), _WORD_HOST_PORT),
    (
        "namespace",
        ("namespace", "-n ", "ns=", "ns/"),
        re.compile(
            r"(?i)(?:\bnamespace[\"']?\s*[:=]\s*[\"']?|(?:\s-n|--namespace)[=\s]+|\bnamespaces/|\bns[=/])"
            r"([a-z0-9][a-z0-9\-]*)"
        ),
    ),
    (
        "cluster",
        ("cluster", "context"),
        re.compile(
            r"(?i)(?:\bcluster(?:[_\-]?name)?[\"']?\s*[:=]\s*[\"']?|--cluster(?:-name)?[=\s]+"
            r"|\b(?:kube)?context[\"']?\s*[:=]\s*[\"']?|clusters?/)([A-Za-z0-9][A-Za-z0-9_.:/@\-]*)"
        ),
    ),
    (
        "pod",
        ("pod",),
        re.compile(
            r"(?i)(?:\bpod(?:[_\-]?name)?[\"']?\s*[:=]\s*[\"']?|\bpods?/|\bpod\s+[\"']?|--pod[=\s]+)"
            r"([a-z0-9][a-z0-9.\-]*[a-z0-9])"
        ),
    ),
    (
        "pod",
        ("-",),
        re.compile(r"(?<![a-z0-9\-])([a-z][a-z0-9\-]{3,60}-[a-z0-9]{8,10}-[a-z0-9]{5})(?![a-z0-9\-])"),
    ),
    (
        "account",
        ("account", "sbatch"),
        re.compile(r"(?:--account[=\s]+|#SBATCH\s+-A\s*)([A-Za-z0-9][\w.\-]*)"),
    ),
    (
        "host",
        ("nodelist", "sbatch"),
        re.compile(r"(?:--nodelist[=\s]+|#SBATCH\s+-w\s*)([A-Za-z0-9][\w.\-\[\],]*)"),
    ),
    ("account", ("arn:",), re.compile(r"\barn:aws[a-z\-]*:[a-z0-9\-]*:[a-z0-9\-]*:(\d{12})(?=:)")),
    (
        "user",
        ("user", "login", "-l "),
        re.compile(
            r"(?i)(?:[\"'](?:user|user_id|userid|username|end_user|customer_id)[\"']\s*:\s*[\"']"
            r"|\bx-(?:user|end-user)(?:-id)?\s*:\s*|\b(?:user|username|user_id|login)\s*[=:]\s*[\"']?"
            r"|\bUSER=|\bLOGNAME=|\b-l\s+)([^\s\"',}{]+)"
        ),
    ),
)
"""Identifiers found by their context: a host after --host / ssh / machine / before :port, a
namespace, cluster, pod or user name after the word that names it."""

_NOT_NAMES = STOP_WORDS | frozenset({"default", "kube-system", "true", "false", "none", "null"})


def contexts(text: str) -> Iterator[Span]:
    low = text.lower()
    found: list[tuple[str, re.Match[str]]] = [("host", m) for m in _host_flags(text)]
    for kind, needles, rx in _CONTEXTS:
        if not any(n in low for n in needles):
            continue
        found.extend((kind, m) for m in rx.finditer(text))
    for kind, m in found:
        if True:
            value = m.group(1).strip(".")
            low = value.lower()
            if not value or low in _NOT_NAMES or value.startswith(("<", "$", "{")):
                continue
            if kind == "host" and (valid_ipv4_loose(value) or value.isdigit() or low in LOOPBACK_NAMES):
                continue
            if kind == "host" and (low in _NOT_HOSTS or low in CODE_ROOTS or low in STOP_WORDS):
                continue
            if kind == "host" and "." in value and not fqdn_end(value) and not re.search(r"\d", value):
                continue  # err.response, self.host: code, not a host
            yield Span(m.start(1), m.start(1) + len(value), kind)


@lru_cache(maxsize=1)
def machine_hosts() -> frozenset[str]:
    """This machine's own names (host name, FQDN), looked up once."""
    names: set[str] = set()
    with suppress(OSError):
        names.add(socket.gethostname())
    with suppress(OSError):
        names.add(socket.getfqdn())
    return frozenset(n for n in names if n and n.lower() not in LOOPBACK_NAMES)
