"""Render both kinds of `trainbudget report` and screenshot them with headless Chromium into
docs/report-70b.png (the 70B / 15T / 1024 H100 plan) and docs/report-run.png (a short training
run of the default model on this machine's CPU, trained first unless --run is given).

    python scripts/report_screenshots.py                 # trains 120 steps first (about a minute)
    python scripts/report_screenshots.py --run RUN_DIR   # reuse a finished run

The run trains on one CPU thread (OMP_NUM_THREADS=1 unless set): on a machine shared with
other work, two threads that wait for each other time steps far from what the roofline measured
at start-up predicts, one thread much less.

Needs matplotlib, torch (for the training run) and a Chromium binary (chromium,
chromium-browser or google-chrome on PATH). The screenshots are cut below the page's last line.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
os.environ.setdefault("OMP_NUM_THREADS", "1")  # read when torch is imported, by `train`

from trainbudget.cli.main import main  # noqa: E402  (after the path above)

PLAN_ARGV = (
    *("--model", "llama-3-70b", "--tokens", "15T", "--gpus", "1024", "--gpu", "h100-sxm"),
    *("--seq-len", "8192", "--global-batch", "512"),
)
TRAIN_ARGV = (
    *("--steps", "120", "--log-interval", "2", "--eval-interval", "20"),
    *("--no-tensorboard", "--device", "cpu"),
)
WIDTH_PX = 1200
HEIGHT_PX = 9000  # taller than either page; the blank below the page is cut off


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit(
        "no chromium, chromium-browser or google-chrome on PATH: install one (Debian/Ubuntu: "
        "sudo apt-get install -y chromium; macOS: brew install --cask chromium)"
    )


def screenshot(html: Path, png: Path, browser: str) -> None:
    """Headless Chromium at WIDTH_PX wide; then the white space under the page is cut."""
    from PIL import Image, ImageChops

    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            "--force-device-scale-factor=1",
            f"--screenshot={png}",
            f"--window-size={WIDTH_PX},{HEIGHT_PX}",
            html.resolve().as_uri(),
        ],
        check=True,
        capture_output=True,
    )
    with Image.open(png) as image:
        rgb = image.convert("RGB")
    box = ImageChops.difference(rgb, Image.new("RGB", rgb.size, "white")).getbbox()
    if box is None:
        sys.exit(f"{png} is blank: Chromium did not render {html}")
    rgb.crop((0, 0, rgb.width, min(rgb.height, box[3] + 24))).save(png, optimize=True)


def report(argv: tuple[str, ...], out: Path) -> None:
    code = main(["report", *argv, "--out", str(out)])
    if code:
        sys.exit(f"trainbudget report {' '.join(argv)} exited with {code}")


def main_() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--run", help="a finished run directory (default: train one now)")
    p.add_argument("--docs", default=str(ROOT / "docs"), help="where the PNGs go")
    args = p.parse_args()
    browser = chromium()
    docs = Path(args.docs)
    with tempfile.TemporaryDirectory(prefix="report-shots-") as tmp:
        work = Path(tmp)
        report(PLAN_ARGV, work / "plan.html")
        run_dir = args.run
        if run_dir is None:
            run_dir = str(work / "default-model-cpu")
            if main(["train", *TRAIN_ARGV, "--out", run_dir]):
                sys.exit("training the run failed")
        report(("--run", run_dir), work / "run.html")
        for html, name in (
            (work / "plan.html", "report-70b.png"),
            (work / "run.html", "report-run.png"),
        ):
            screenshot(html, docs / name, browser)
            print(f"wrote {docs / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main_())
