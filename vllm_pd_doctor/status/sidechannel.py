"""The NIXL side-channel probe: ask an engine for its handshake metadata the way a peer does.

vLLM's NIXL connector (0.2x-0.33: `nixl/base_scheduler.py` `_nixl_handshake_listener`) serves a
zmq ROUTER socket on `VLLM_NIXL_SIDE_CHANNEL_PORT`. A peer's worker sends one msgpack message
`(b"get_meta_msg", pp_rank, tp_rank)` from a REQ socket and gets two frames: the msgpack-encoded
`NixlHandshakePayload {compatibility_hash, agent_metadata_bytes}` and the listener's clock. The
agent metadata (`NixlAgentMetadata`, a msgpack map) carries block_size, num_blocks,
kv_cache_layout, the attention backend and (newer releases) dcp/pcp sizes.

Only rank (0, 0) is asked: the listener looks the rank up in a dict, and a rank the engine does
not have raises in its thread and ends the listener. Nothing else is ever sent: no transfer, no
notification, no registration.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

GET_META_MSG = b"get_meta_msg"
KEEP = (
    "engine_id",
    "num_blocks",
    "block_size",
    "block_lens",
    "kv_cache_layout",
    "attn_backend_name",
    "ssm_sizes",
    "physical_blocks_per_logical_kv_block",
    "dcp_size",
    "pcp_size",
    "device_id",
)
"""The agent metadata fields status reads (the NIXL agent blob and base addresses are dropped)."""


@dataclass(frozen=True)
class Handshake:
    """One engine's handshake metadata as its side channel served it."""

    compatibility_hash: str | None
    metadata: dict[str, Any]
    """The KEEP fields present in this release's NixlAgentMetadata."""
    fields: tuple[str, ...]
    """Every field name the engine sent (tells the release's wire schema)."""
    raw_size: int


class ProbeError(Exception):
    """The side channel did not answer, or answered something that is not a NIXL handshake."""


def request() -> bytes:
    import msgpack

    return bytes(msgpack.packb((GET_META_MSG, 0, 0), use_bin_type=True))


def ask(host: str, port: int, timeout_s: float = 3.0) -> list[bytes]:
    """The raw reply frames of one get_meta_msg request (rank 0, 0)."""
    import zmq

    ctx = zmq.Context()
    try:
        sock = ctx.socket(zmq.REQ)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVTIMEO, int(timeout_s * 1000))
        sock.setsockopt(zmq.SNDTIMEO, int(timeout_s * 1000))
        sock.setsockopt(zmq.CONNECT_TIMEOUT, int(timeout_s * 1000))
        target = f"[{host}]" if ":" in host else host
        sock.connect(f"tcp://{target}:{port}")
        try:
            sock.send(request())
            return [bytes(f) for f in sock.recv_multipart()]
        except zmq.Again:
            raise ProbeError(f"no answer within {timeout_s:.0f} s") from None
        except zmq.ZMQError as exc:
            raise ProbeError(str(exc)) from None
        finally:
            sock.close(linger=0)
    finally:
        ctx.term()


def decode(frames: list[bytes]) -> Handshake:
    """The handshake from the reply frames (0.2x-0.33 wire: payload, then the clock)."""
    import msgpack

    if not frames:
        raise ProbeError("an empty reply")
    try:
        payload = msgpack.unpackb(frames[0], raw=False, strict_map_key=False)
    except (ValueError, msgpack.UnpackException) as exc:
        raise ProbeError(f"the reply is not msgpack ({exc})") from None
    if isinstance(payload, dict) and "agent_metadata_bytes" in payload:
        chash = payload.get("compatibility_hash")
        inner = payload["agent_metadata_bytes"]
    elif isinstance(payload, dict) and "block_size" in payload:  # before the hashed payload
        chash, inner = None, frames[0]
    else:
        raise ProbeError("the reply is not a NIXL handshake payload")
    try:
        meta = msgpack.unpackb(inner, raw=False, strict_map_key=False) if isinstance(inner, bytes) else inner
    except (ValueError, msgpack.UnpackException) as exc:
        raise ProbeError(f"the agent metadata is not msgpack ({exc})") from None
    if not isinstance(meta, dict):
        raise ProbeError("the agent metadata is not a map")
    kept = {k: _plain(meta[k]) for k in KEEP if k in meta}
    return Handshake(
        compatibility_hash=str(chash) if chash is not None else None,
        metadata=kept,
        fields=tuple(str(k) for k in meta),
        raw_size=len(frames[0]),
    )


def _plain(v: Any) -> Any:
    if isinstance(v, bytes):
        return v.hex()
    if isinstance(v, (list, tuple)):
        return [_plain(x) for x in v]
    return v


ProbeAnswer = tuple[Handshake | None, str | None, list[bytes]]


REFUSED = "connection refused: nothing listens there"


def _listening(host: str, port: int, timeout_s: float) -> None:
    """Raise ProbeError when nothing listens on the port (zmq would retry silently until the
    timeout). A TCP connect and close, nothing sent: a NIXL listener drops it as any peer that
    goes away before its greeting."""
    import socket

    try:
        with socket.create_connection((host, port), timeout=timeout_s):
            pass
    except ConnectionRefusedError:
        raise ProbeError(REFUSED) from None
    except OSError:
        return  # unreachable or slow: the zmq request below says so within its timeout


def probe(host: str, port: int, timeout_s: float = 3.0) -> ProbeAnswer:
    """(handshake, None, frames) or (None, why, frames); never raises."""
    frames: list[bytes] = []
    try:
        _listening(host, port, timeout_s)
        frames = ask(host, port, timeout_s)
        return decode(frames), None, frames
    except ProbeError as exc:
        return None, str(exc), frames
    except Exception as exc:  # a zmq or msgpack failure of any kind: reported, never a traceback
        return None, f"{type(exc).__name__}: {exc}", frames
