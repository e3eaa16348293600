"""Find the lines of a vLLM log that matter for a P/D bug report (pure functions).

vLLM prefixes lines from its engine process (`(EngineCore_DP0 pid=123) `) and its logger
(`ERROR 11-30 22:31:39 [core.py:711] `); both are stripped before matching (see
`vllm_pd_doctor.tracebacks`), the excerpts keep the lines as written, with their line numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

from vllm_pd_doctor.tracebacks import TB_START, strip_prefix, traceback_end


@dataclass(frozen=True)
class Signature:
    key: str
    needle: str
    meaning: str


SIGNATURES: tuple[Signature, ...] = (
    Signature(
        "assert_53514",
        "assert num_new_tokens > 0",
        "the scheduler's assertion of vLLM #53514 (P-side N-1 truncation)",
    ),
    Signature("enginecore_fatal", "EngineCore encountered a fatal error", "the engine core died"),
    Signature("dump_input", "[dump_input.py", "vLLM's dump of the scheduler state at the crash"),
    Signature(
        "nixl_compat_ok", "NIXL compatibility check passed", "the NIXL handshake's compatibility check passed"
    ),
    Signature("handshake_failed", "handshake_failed", "a NIXL handshake failed"),
    Signature(
        "no_kv_connector",
        "Got kv_transfer_params, but no KVConnector found",
        "a request carried kv_transfer_params to an engine without a KV connector",
    ),
    Signature(
        "mamba_conv_layout",
        "3-read Mamba conv transfer requires DS conv state layout",
        "the Mamba conv-state transfer needs the DS conv state layout",
    ),
    Signature(
        "ssm_one_block",
        "SSM can only have one local block",
        "the SSM (Mamba) state spans more than one local block",
    ),
    Signature(
        "attn_block_size",
        "Setting attention block size to",
        "vLLM raised the attention block size to fit the mamba page size",
    ),
    Signature("nixl_transfer_failed", "NIXL transfer failed", "a NIXL transfer failed"),
    Signature("nixl_error", "nixlBackendError", "NIXL reported a backend error"),
    Signature("kv_load_failed", "Failed to load KV", "a KV load failed on the decode side"),
)

_CONTEXT = 2
MAX_EXCERPT_LINES = 80
MAX_DUMP_LINES = 60


@dataclass(frozen=True)
class Excerpt:
    """A run of consecutive log lines (1-based `first_line`) and why it was kept."""

    kind: str
    """traceback, dump_input or signature."""
    reasons: tuple[str, ...]
    """Signature keys found in these lines."""
    first_line: int
    lines: tuple[str, ...]

    @property
    def last_line(self) -> int:
        return self.first_line + len(self.lines) - 1


@dataclass(frozen=True)
class LogFindings:
    """What one log says, as excerpts and signature hit counts."""

    signatures: tuple[tuple[str, int], ...]
    """(signature key, number of lines holding it), in SIGNATURES order."""
    excerpts: tuple[Excerpt, ...]

    @property
    def found(self) -> tuple[str, ...]:
        return tuple(k for k, _ in self.signatures)


def find(text: str) -> LogFindings:
    """Excerpt a log: tracebacks (with the lines just before), dump_input runs, signatures."""
    raw = text.splitlines()
    body = [strip_prefix(line) for line in raw]
    counts: dict[str, int] = {}
    reasons_at: dict[int, list[str]] = {}
    for i, s in enumerate(body):
        for sig in SIGNATURES:
            if sig.needle in s or sig.needle in raw[i]:
                counts[sig.key] = counts.get(sig.key, 0) + 1
                reasons_at.setdefault(i, []).append(sig.key)
    spans: list[tuple[int, int, str]] = []
    i = 0
    while i < len(body):
        if body[i].startswith(TB_START) or body[i].lstrip().startswith(TB_START):
            end = traceback_end(body, i)
            spans.append((max(0, i - 3), min(end, i + MAX_EXCERPT_LINES), "traceback"))
            i = end + 1
            continue
        i += 1
    i = 0
    while i < len(body):
        if "dump_input" in reasons_at.get(i, ()):
            j = i
            while j + 1 < len(body) and "dump_input" in reasons_at.get(j + 1, ()):
                j += 1
            spans.append((i, min(j, i + MAX_DUMP_LINES - 1), "dump_input"))
            i = j + 1
            continue
        i += 1
    covered = bytearray(len(body))  # linear: a list of spans scanned per line was quadratic
    for a, b, _ in spans:
        covered[a : b + 1] = b"\x01" * (b + 1 - a)
    last = -1  # signature spans come in line order: only the last one can cover the next line
    for idx in sorted(reasons_at):
        if covered[idx] or idx <= last:
            continue
        a, b = max(0, idx - _CONTEXT), min(len(body) - 1, idx + _CONTEXT)
        spans.append((a, b, "signature"))
        last = b
    merged = _merge(sorted(spans))
    excerpts = []
    for a, b, kind in merged:
        reasons = tuple(dict.fromkeys(r for k in range(a, b + 1) for r in reasons_at.get(k, ())))
        excerpts.append(Excerpt(kind=kind, reasons=reasons, first_line=a + 1, lines=tuple(raw[a : b + 1])))
    sigs = tuple((s.key, counts[s.key]) for s in SIGNATURES if s.key in counts)
    return LogFindings(signatures=sigs, excerpts=tuple(excerpts))


_KIND_RANK = {"traceback": 0, "dump_input": 1, "signature": 2}


def _merge(spans: list[tuple[int, int, str]]) -> list[tuple[int, int, str]]:
    out: list[tuple[int, int, str]] = []
    for a, b, kind in spans:
        if out and a <= out[-1][1] + 1:
            pa, pb, pk = out[-1]
            k = pk if _KIND_RANK[pk] <= _KIND_RANK[kind] else kind
            out[-1] = (pa, max(pb, b), k)
        else:
            out.append((a, b, kind))
    return out


def signature_meaning(key: str) -> str:
    for s in SIGNATURES:
        if s.key == key:
            return s.meaning
    return key


def cap(text: str, limit: int) -> tuple[str, int]:
    """At most `limit` characters: the first quarter and the last three quarters, the cut
    marked in place. Returns the text and how many characters were cut."""
    if len(text) <= limit:
        return text, 0
    head = limit // 4
    tail = limit - head
    cut = len(text) - head - tail
    marker = f"\n[... pd-doctor cut {cut} characters here (log capped at {limit}) ...]\n"
    return text[:head] + marker + text[len(text) - tail :], cut
