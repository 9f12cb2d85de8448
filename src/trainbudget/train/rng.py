"""Every random stream of a process (python, numpy's global legacy generator, torch on the CPU,
torch on each CUDA device) captured in plain containers and tensors, so that the state goes
through torch.save and back through torch.load(weights_only=True), and a resumed run draws
exactly the numbers the uninterrupted one would have."""

from __future__ import annotations

import random

import numpy as np
import torch


def capture_rng_state() -> dict:
    """This process's generator states. CUDA's only when CUDA is initialised (capturing it
    would otherwise initialise it); one state per visible device."""
    version, internal, gauss_next = random.getstate()
    kind, key, pos, has_gauss, cached_gaussian = np.random.get_state(legacy=True)
    state = {
        # internal: 624 words of Mersenne Twister state (uint32) and the position, 625 ints
        "python": {
            "version": version,
            "state": torch.tensor(internal, dtype=torch.int64),
            "gauss_next": gauss_next,
        },
        "numpy": {
            "kind": kind,
            "key": torch.from_numpy(key.astype(np.int64)),  # (624,) uint32 words, widened
            "pos": int(pos),
            "has_gauss": int(has_gauss),
            "cached_gaussian": float(cached_gaussian),
        },
        "torch": torch.get_rng_state(),
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def restore_rng_state(state: dict) -> None:
    """The inverse of `capture_rng_state`. Tensors may come back on any device (map_location).
    A CUDA state is restored on the devices both runs have; without CUDA it is ignored (a GPU
    run resumed on the CPU cannot repeat its GPU draws anyway)."""
    py = state["python"]
    internal = tuple(int(x) for x in py["state"].tolist())
    random.setstate((int(py["version"]), internal, py["gauss_next"]))
    npy = state["numpy"]
    key = npy["key"].cpu().numpy().astype(np.uint32)
    np.random.set_state(
        (npy["kind"], key, int(npy["pos"]), int(npy["has_gauss"]), float(npy["cached_gaussian"]))
    )
    torch.set_rng_state(state["torch"].cpu().to(torch.uint8))
    if "cuda" in state and torch.cuda.is_available():
        for device, cuda_state in enumerate(state["cuda"][: torch.cuda.device_count()]):
            torch.cuda.set_rng_state(cuda_state.cpu().to(torch.uint8), device)
