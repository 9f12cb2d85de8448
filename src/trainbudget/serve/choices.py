"""The lists the page's selects offer, read from the core's tables (never typed into the page),
so a new preset or chip appears on the page with no change here."""

from __future__ import annotations

from trainbudget.core.single.flops import RECOMPUTE_KINDS
from trainbudget.core.spec.defaults import DEFAULT_GPU, DEFAULT_PRECISION
from trainbudget.core.spec.frameworks import FRAMEWORKS, GENERIC_NAME
from trainbudget.core.spec.hardware import HARDWARE
from trainbudget.core.spec.precision import PRECISIONS
from trainbudget.core.spec.presets import PRESETS
from trainbudget.emit.engines import VERSIONS


def choices() -> dict:
    """Options of each select, and the value each starts at (the CLI's defaults)."""
    return {
        "model": sorted(PRESETS),
        "gpu": sorted(HARDWARE),
        "framework": sorted(FRAMEWORKS),
        "precision": sorted(PRECISIONS),
        "recompute": list(RECOMPUTE_KINDS),
        "engines": dict(VERSIONS),
        "defaults": {
            "gpu": DEFAULT_GPU,
            "framework": GENERIC_NAME,
            "precision": DEFAULT_PRECISION,
        },
    }
