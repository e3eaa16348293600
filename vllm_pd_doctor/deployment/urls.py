"""The engines of a running deployment as given by URL (`--prefill-url` / `--decode-url`, and their
NIXL side channels), checked before any request: the other half of the one deployment reader."""

from __future__ import annotations

import urllib.parse

from vllm_pd_doctor.infra.errors import BadInput


def check_url(url: str, flag: str) -> str:
    """An engine's URL as given (`--prefill-url URL`): http(s), a host, a port in range; without
    the trailing slash. BadInput (one line, exit 2) otherwise."""
    u = urllib.parse.urlparse(url)
    if u.scheme not in ("http", "https") or not u.hostname:
        raise BadInput(f"{flag} {url}: not an http(s) URL", hint="e.g. http://10.0.0.5:8000")
    try:
        u.port  # noqa: B018 - raises on a bad port
    except ValueError:
        raise BadInput(
            f"{flag} {url}: the port is not a number in 1-65535", hint="e.g. http://10.0.0.5:8000"
        ) from None
    return url.rstrip("/")


def parse_side(value: str, flag: str) -> tuple[str, int]:
    """A NIXL side channel as given (`HOST:PORT`, IPv6 in brackets) -> (host, port)."""
    host, _, port = value.rpartition(":")
    if not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise BadInput(
            f"{flag} {value}: expected HOST:PORT", hint="e.g. 10.0.0.5:5600 (VLLM_NIXL_SIDE_CHANNEL_PORT)"
        )
    return host.strip("[]"), int(port)


__all__ = ["check_url", "parse_side"]
