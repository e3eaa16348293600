"""The HTTP side of the live engine: vLLM's OpenAI-compatible API, /health and /metrics (httpx)."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass
class Outcome:
    """One completion request as it went: HTTP status (None: no answer), body, error, time."""

    status: int | None
    body: Any = None
    error: str | None = None
    elapsed_s: float = 0.0

    @property
    def token_ids(self) -> list[int] | None:
        """The generated token ids (`return_token_ids`), None when the answer has none."""
        try:
            ids = self.body["choices"][0].get("token_ids")
            return [int(t) for t in ids] if ids is not None else None
        except (TypeError, KeyError, IndexError, AttributeError):
            return None

    @property
    def kv_transfer_params(self) -> dict[str, Any] | None:
        kv = self.body.get("kv_transfer_params") if isinstance(self.body, dict) else None
        return kv if isinstance(kv, dict) else None


class Client:
    """One connection pool for every engine of a run (no proxy from the environment)."""

    def __init__(self, timeout: float = 120.0) -> None:
        self.http = httpx.Client(timeout=timeout, trust_env=False)

    def close(self) -> None:
        self.http.close()

    def healthy(self, base: str) -> bool:
        try:
            return self.http.get(f"{base}/health", timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    def text(self, base: str, path: str) -> str:
        r = self.http.get(f"{base}{path}", timeout=15.0)
        r.raise_for_status()
        return r.text

    def model_id(self, base: str) -> str:
        r = self.http.get(f"{base}/v1/models", timeout=15.0)
        r.raise_for_status()
        return str(r.json()["data"][0]["id"])

    def complete(
        self,
        base: str,
        model: str,
        tokens: list[int],
        *,
        max_tokens: int,
        tag: str,
        kv: dict[str, Any] | None,
    ) -> Outcome:
        """A greedy completion of token-id `tokens`, its request id `tag`; never raises."""
        body: dict[str, Any] = {
            "model": model,
            "prompt": tokens,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            "return_token_ids": True,
        }
        if kv is not None:
            body["kv_transfer_params"] = kv
        t0 = time.perf_counter()
        try:
            r = self.http.post(f"{base}/v1/completions", json=body, headers={"X-Request-Id": tag})
        except httpx.HTTPError as exc:
            return Outcome(
                status=None, error=f"{type(exc).__name__}: {exc}", elapsed_s=time.perf_counter() - t0
            )
        try:
            data: Any = r.json()
        except ValueError:
            data = r.text[:2000]
        return Outcome(status=r.status_code, body=data, elapsed_s=time.perf_counter() - t0)
