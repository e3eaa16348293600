"""Issue 31's moves (scripts/house_moves.py) hold: every old path is gone, every new one there, and no
tracked file still names an old location (a merged branch that does: run `house_moves.py --move
--rewrite-all`). The rewrite itself is idempotent and leaves lookalikes alone."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("house_moves", ROOT / "scripts" / "house_moves.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("house_moves", mod)
    spec.loader.exec_module(mod)
    return mod


def _tracked() -> list[str]:
    out = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False)
    if out.returncode != 0:
        pytest.skip("not a git checkout")
    return out.stdout.split()


def test_every_move_is_done() -> None:
    moves = _script()
    files = _tracked()
    for old, new in moves.MOVES:
        assert not any(f == old or (old.endswith("/") and f.startswith(old)) for f in files), old
        assert any(f == new or (new.endswith("/") and f.startswith(new)) for f in files), new


def test_no_file_names_an_old_location() -> None:
    moves = _script()
    assert moves.stale(_tracked()) == []


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (
            "from vllm_pd_doctor import limits, scenario",
            "from vllm_pd_doctor.infra import limits\nfrom vllm_pd_doctor.repro import request as scenario",
        ),
        (
            "from vllm_pd_doctor.knowledge.facts import ModelInfo",
            "from vllm_pd_doctor.knowledge.readers.facts import ModelInfo",
        ),
        (
            "from vllm_pd_doctor.knowledge import models",
            "from vllm_pd_doctor.knowledge.models import resolve as models",
        ),
        ('"vllm_pd_doctor.target.plugin:register"', '"vllm_pd_doctor.invllm.plugin:register"'),
        ('ROOT / "repro" / "models" / "tiny-hybrid"', 'ROOT / "assets" / "models" / "tiny-hybrid"'),
        ("see `target/hotfix.py`, `envs.py`", "see `invllm/hotfix.py`, `infra/envs.py`"),
        ("from tests.live.test_live import ROOT", "from tests.repro.live.test_live import ROOT"),
    ],
)
def test_rewrite_moves_a_reference_once(old: str, new: str) -> None:
    moves = _script()
    assert moves.rewrite_text(old) == new
    assert moves.rewrite_text(new) == new


@pytest.mark.parametrize(
    "same",
    [
        '(vllm_path / "envs.py").read_text()',  # vLLM's own envs.py
        '"repro/run_repro.py"',  # the report bundle's folder, not the data folder
        "`repro/models.py`",  # the repro's default models
        "from vllm_pd_doctor.knowledge.facts import connectors",  # the new package
        "tests/fixtures/live/x.log",
    ],
)
def test_rewrite_leaves_lookalikes(same: str) -> None:
    assert _script().rewrite_text(same) == same
