"""Achievable fractions of the datasheet peaks (GEMMs, fused attention, HBM) that every step-time
term reads: one set for every plan and model, resolved against a GPU's measured figures."""

from __future__ import annotations

from dataclasses import dataclass, replace

from trainbudget.core.spec.hardware import Hardware

DEFAULT_MATMUL_FRACTION = 0.80
"""Large-GEMM fraction of the dense peak for a GPU whose row cites no MAMF measurement: the
H100 SXM's measured 80 % (hardware.py), the lowest of the NVIDIA parts measured."""
DEFAULT_ATTENTION_FRACTION = 0.5
"""Fused-attention fraction of the peak for a GPU whose row cites none: the A100's figure."""


@dataclass(frozen=True, kw_only=True)
class Efficiency:
    """Achievable fractions of the datasheet peaks. One set for every plan and model: they
    are properties of the GPU and its kernels, not tuned per case (docs/validation.md shows
    the errors). None: the hardware row's measured figure (`resolved`)."""

    matmul: float | None = None
    """Fraction of the dense peak that large, well-shaped GEMMs reach on this GPU: a
    calibration's measured figure (`trainbudget bench`), or None for the row's MAMF
    (`Hardware.matmul_fraction`). Each GEMM then loses its tile and wave quantization
    (`gemm_shape_efficiency`)."""
    in_training: float = 0.85
    """Share of that rate a training step's GEMMs keep: the epilogues (bias, casts) fused
    into them and clocks that drop further when memory-bound kernels interleave (the output
    writes, launch gaps and the CPU's dispatch are timed apart: `EPILOGUE`,
    KERNELS_PER_LAYER_FORWARD). The one fitted constant: the value of IN_TRAINING_GRID
    (validation.py) with the smallest mean absolute error over the published runs;
    docs/validation.md reports the leave-one-source-out error of that choice."""
    attention: float | None = None
    """Fraction of the dense peak fused attention sustains, forward and backward; None: the
    row's figure for the framework's kernel (`Hardware.attention_fraction`)."""
    hbm: float = 0.85
    """Fraction of HBM bandwidth memory-bound kernels achieve (STREAM-like copy rates)."""

    def resolved(self, hw: Hardware, kernel: str = "flash2") -> Efficiency:
        """Every fraction a number: the given ones, else `hw`'s measured ones for `kernel`
        (a GPU without a figure for it runs the 'flash2' kernel), else the defaults."""
        matmul = self.matmul
        if matmul is None:
            matmul = hw.matmul_fraction or DEFAULT_MATMUL_FRACTION
        attention = self.attention
        if attention is None:
            table = hw.attention_fraction
            attention = table.get(kernel, table.get("flash2", DEFAULT_ATTENTION_FRACTION))
        return replace(self, matmul=matmul, attention=attention)


DEFAULT_EFFICIENCY = Efficiency()
