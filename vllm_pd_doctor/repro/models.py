"""The models a repro runs when no --model is given, named in one place (configs under assets/models/).

The tiny hybrid (GraniteMoeHybrid; the live engine gives it random weights) for #53514 and every
scenario whose model matters; the dense family (`knowledge.facts.scenarios.DENSE_MODEL`: the scenario
registry decides which scenarios need no hybrid) for the others. `assets/scripts/` makes their weights.
"""

from __future__ import annotations

from pathlib import Path

from vllm_pd_doctor.knowledge.facts import scenarios as known
from vllm_pd_doctor.knowledge.models.resolve import assets_dir

HYBRID = "tiny-hybrid"
"""The default model: the bundled tiny hybrid."""
DENSE = known.DENSE_MODEL
"""The model of the scenarios whose model does not matter."""


def models_dir() -> Path:
    """The bundled model configs (assets/models/)."""
    return assets_dir() / "models"


def scripts_dir() -> Path:
    """The scripts that make the bundled models' weights (assets/scripts/)."""
    return assets_dir() / "scripts"


def hybrid() -> Path:
    """The default model's directory."""
    return models_dir() / HYBRID


def dense() -> Path:
    """The dense model's directory."""
    return models_dir() / DENSE
