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
_EMAIL = re.compile(rf"(?<![A-Za-z0-9._%+\-])[A-Za-z0-9._%+\-]+@((?:{_LABEL}\.)+[A-Za-z]{{2,24}})\b")
_IPV4 = re.compile(r"(?<![\d.])(?<![A-Za-z])(\d{1,3}(?:\.\d{1,3}){3})(?!\d|\.\d)")
_IPV6 = re.compile(r"(?<![0-9A-Za-z:.])([0-9A-Fa-f]{0,4}(?::[0-9A-Fa-f]{0,4}){2,7})(?![0-9A-Za-z:])")
_HOME = re.compile(r"(?<![A-Za-z0-9_.\-])(/home|/Users|/export/home)/([^/\s\"'<>:;,\\]+)")
_URL_HOST = re.compile(r"(?i)\b[a-z][a-z0-9+.\-]*://(?:[^\s/@]*@)?(\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9.\-_]+)")
_HOST_NAME = (
    r"(?:[A-Za-z_\-]*host(?:name)?s?|[A-Za-z_\-]*_ip|[A-Za-z_\-]*addr(?:ess)?|"
    r"[A-Za-z_\-]*(?:master|server|node|endpoint|head)(?:_name)?)"
)
_HOST_FLAG = re.compile(
    rf"(?i)(?:--{_HOST_NAME}(?:=|\s+)|\b{_HOST_NAME}[\"']?\s*[=:]\s*)[\"']?"
    r"([A-Za-z0-9][A-Za-z0-9.\-_]*)"
)
_SSH = re.compile(rf"\b[a-z_][a-z0-9_\-]*@({_LABEL}(?:\.{_LABEL})*)")


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
    ip = ipaddress.ip_address(text)
    return ip.is_loopback or ip.is_unspecified


def fqdn_end(name: str) -> int:
    """Length of the host part of a dotted name (file extensions at the end dropped), or 0 when
    it does not look like a host (a file name, a Python path, a version)."""
    labels = name.split(".")
    while len(labels) > 2 and labels[-1].lower() in EXTENSIONS:
        labels.pop()
    if len(labels) < 2:
        return 0
    tld = labels[-1]
    if not (re.fullmatch(r"[a-z]{2,24}", tld) or re.fullmatch(r"[A-Z]{2,24}", tld)):
        return 0
    if any(lab.lower() in EXTENSIONS for lab in labels[1:]):
        return 0
    if labels[0].lower() in CODE_ROOTS or any(lab.isdigit() for lab in labels[:1]):
        return 0
    if any(re.search(r"[a-z]", lab) and re.search(r"[A-Z]", lab) for lab in labels):
        return 0  # CamelCase: a Python class or attribute path
    host = ".".join(labels)
    if host.lower() in PUBLIC_HOSTS or host.lower() in LOOPBACK_NAMES:
        return 0
    return len(host)


def fqdns(text: str) -> Iterator[Span]:
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
    for m in _EMAIL.finditer(text):
        if m.group(1).lower() in PUBLIC_HOSTS and m.group(0).split("@")[0].lower() in ("noreply", "git"):
            continue
        yield Span(m.start(), m.end(), "email")


def ips(text: str) -> Iterator[Span]:
    for rx, valid in ((_IPV4, valid_ipv4), (_IPV6, valid_ipv6)):
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
    for m in _HOME.finditer(text):
        yield Span(m.start(2), m.end(2), "user")


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
        if "." in h and len(first) >= 3 and first.lower() not in STOP_WORDS:
            out.add(first)  # the short name of gpu-node-7.example.com
    return out


def hosts_in(text: str) -> set[str]:
    """Host names (not addresses) named in a command line, config or environment text."""
    found: set[str] = set()
    for rx in (_URL_HOST, _HOST_FLAG, _SSH):
        for m in rx.finditer(text):
            found.add(m.group(1))
    for span in fqdns(text):
        found.add(text[span.start : span.end])
    out = set()
    for h in found:
        h = h.strip(".[]")
        if h and not valid_ipv4(h) and not valid_ipv6(h) and not h.isdigit() and h.lower() not in STOP_WORDS:
            out.add(h)
    return out


@lru_cache(maxsize=1)
def machine_hosts() -> frozenset[str]:
    """This machine's own names (host name, FQDN), looked up once."""
    names: set[str] = set()
    with suppress(OSError):
        names.add(socket.gethostname())
    with suppress(OSError):
        names.add(socket.getfqdn())
    return frozenset(n for n in names if n and n.lower() not in LOOPBACK_NAMES)
