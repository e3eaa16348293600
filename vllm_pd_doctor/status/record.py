"""Record one status window (every engine's two /metrics texts and side-channel reply) and replay it.

The live tests record the real engines' answers under `tests/fixtures/status/<case>/`, with
`meta.json` naming how they were made (releases, commands, the fault induced); the fast tier
replays them through the same `core.judge`. The NIXL agent blob and the KV base addresses are
dropped from the recorded reply (they are opaque and machine-specific); every other field stays.
The served model's config.json is kept beside them (`model/config.json`) and replay points the
engines' model root at it, so a replayed case reads the model's kind from the fixture, never from
whatever a previous run left on this machine.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

from vllm_pd_doctor.knowledge.facts import metrics as km
from vllm_pd_doctor.status import scrape, sidechannel
from vllm_pd_doctor.status.core import Endpoint
from vllm_pd_doctor.status.window import Window


def _strip(frame: bytes) -> bytes:
    import msgpack

    payload = msgpack.unpackb(frame, raw=False, strict_map_key=False)
    if isinstance(payload, dict) and isinstance(payload.get("agent_metadata_bytes"), bytes):
        meta = msgpack.unpackb(payload["agent_metadata_bytes"], raw=False, strict_map_key=False)
        if isinstance(meta, dict):
            meta["agent_metadata"] = b""
            meta["kv_caches_base_addr"] = []
            payload["agent_metadata_bytes"] = msgpack.packb(meta, use_bin_type=True)
    return bytes(msgpack.packb(payload, use_bin_type=True))


def record(windows: list[Window], endpoints: list[Endpoint], dest: Path, how: dict[str, Any]) -> None:
    dest.mkdir(parents=True, exist_ok=True)
    _keep_model_config(windows, dest)
    engines = []
    for i, (w, e) in enumerate(zip(windows, endpoints, strict=True)):
        stem = f"{i}-{w.role}"
        for which, sc in (("before", w.before), ("after", w.after)):
            (dest / f"{stem}-{which}.metrics.txt").write_text(sc.metrics_text or "", encoding="utf-8")
        side_file = None
        if w.side_frames:
            side_file = f"{stem}.side.msgpack"
            (dest / side_file).write_bytes(_strip(w.side_frames[0]))
        engines.append(
            {
                "role": w.role,
                "url": w.after.url,
                "version": w.before.version,
                "models": list(w.before.models),
                "model_root": w.before.model_root,
                "health": w.before.health,
                "interval_s": round(w.interval, 3),
                "side_address": w.side_address,
                "side_error": w.side_error,
                "side_file": side_file,
                "tp": e.tp,
                "stem": stem,
                "down": w.down,
                "error": w.after.error or w.before.error,
            }
        )
    doc = {"how": how, "engines": engines}
    (dest / "meta.json").write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")


MODEL_DIR = "model"


def _keep_model_config(windows: list[Window], dest: Path) -> None:
    roots = {w.before.model_root for w in windows if w.before.model_root}
    for root in sorted(roots)[:1]:  # one model per recorded case (the live tests serve one)
        cfg = Path(root) / "config.json"
        if cfg.is_file():
            (dest / MODEL_DIR).mkdir(exist_ok=True)
            shutil.copyfile(cfg, dest / MODEL_DIR / "config.json")


def model_root(src: Path, recorded: str | None) -> str | None:
    """The model root a replay serves: the case's own copy of the model's config.json when it has
    one (the recorded path is the recording machine's), else the recorded path."""
    mine = src / MODEL_DIR
    return str(mine.resolve()) if recorded and (mine / "config.json").is_file() else recorded


def replay(src: Path) -> tuple[list[Window], list[Endpoint], dict[str, Any]]:
    doc = json.loads((src / "meta.json").read_text(encoding="utf-8"))
    windows, endpoints = [], []
    for e in doc["engines"]:
        scrapes = []
        for at, which in ((0.0, "before"), (float(e["interval_s"]), "after")):
            text = (src / f"{e['stem']}-{which}.metrics.txt").read_text(encoding="utf-8")
            sc = scrape.Scrape(url=e["url"], at=at, health=e["health"], version=e["version"])
            sc.models, sc.model_root = tuple(e["models"]), model_root(src, e["model_root"])
            sc.error, sc.down = e.get("error"), e.get("down")
            if text:
                sc.samples, sc.info = scrape.parse_metrics(text)
                sc.metrics_text = text
            scrapes.append(sc)
        release = None if e.get("down") else km.for_release(e["version"])
        w = Window(e["role"], scrapes[0], scrapes[1], release)
        w.side_address, w.side_error = e["side_address"], e["side_error"]
        if e["side_file"]:
            frames = [(src / e["side_file"]).read_bytes()]
            try:
                w.handshake = sidechannel.decode(frames)
            except sidechannel.ProbeError as exc:
                w.side_error = str(exc)
            w.side_frames = tuple(frames)
        windows.append(w)
        side = None
        if e["side_address"]:
            host, _, port = str(e["side_address"]).rpartition(":")
            side = (host, int(port))
        endpoints.append(Endpoint(e["role"], e["url"], side, e["tp"]))
    return windows, endpoints, doc["how"]
