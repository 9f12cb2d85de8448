"""Print the prediction-vs-measurement table of trainbudget.profile.matrix (docs/validation.md).

python scripts/profile_matrix.py [--device fake-cpu|cpu|cuda]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from trainbudget.profile.matrix import matrix
from trainbudget.profile.report import profile_step


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="fake-cpu")
    device = parser.parse_args().device
    print(
        "| case | peak at | predicted peak MB | measured peak MB | peak error | "
        "activations error | FLOPs/step error |"
    )
    print("|---|---|---|---|---|---|---|")
    worst = {"peak": 0.0, "flops_per_step": 0.0, "state": 0.0}
    for c in matrix():
        r = profile_step(
            c.spec,
            micro_batch=c.micro_batch,
            seq_len=c.seq_len,
            precision=c.precision,
            optimizer=c.optimizer,
            recompute=c.recompute,
            device=device,
        )
        e = r["error"]
        worst["peak"] = max(worst["peak"], abs(e["peak"]))
        worst["flops_per_step"] = max(worst["flops_per_step"], abs(e["flops_per_step"]))
        worst["state"] = max(worst["state"], *(abs(e[k]) for k in ("params", "grads", "optimizer")))
        print(
            f"| {c.id} | {r['peak_phase']} | {r['predicted']['peak'] / 1e6:.2f} | "
            f"{r['measured']['peak'] / 1e6:.2f} | {100 * e['peak']:+.3f} % | "
            f"{100 * e['activations']:+.3f} % | {100 * e['flops_per_step']:+.4f} % |"
        )
    print()
    print(
        f"largest |error| over {len(matrix())} cases on {device}: peak "
        f"{100 * worst['peak']:.3f} %, weights/gradients/optimizer state "
        f"{100 * worst['state']:.3f} %, FLOPs per step {100 * worst['flops_per_step']:.4f} %"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
