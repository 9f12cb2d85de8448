"""One rank of an expert-parallel check, started by tests/train/parallel/test_expert_parallel.py:
`python expert_ranks.py RANK WORLD EP STORE OUT CASES`. The ranks meet over a file store (no
port) and run each of CASES (comma-separated) in turn, in one process group: one interpreter
start per rank for all of them. Each rank builds the same tiny MoE model (same seed), keeps an
unsharded copy as the reference, shards the experts (train.parallel.expert_parallel) and runs one
forward and backward of its rows of a global batch; the reference runs every rank's rows, one
rank's at a time, as one process would. Writes OUT (JSON, {case: result}): the largest
differences of the outputs and of the local experts' gradients (EP's gradient before the 1/dp
scaling is the sum over the ranks' losses), the all-to-all bytes sent, and the expert
parameters held.

CASE "balanced": top-2 of 4 experts, dropless. "recompute": the same with full recomputation.
"idle": a router bias sends every token to expert 0 (top-1): the experts of the other ranks
get no token anywhere."""

from __future__ import annotations

import copy
import json
import sys

import torch
import torch.distributed as dist

from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.model.moe import MoE
from trainbudget.model.transformer import build_model
from trainbudget.train.parallel import expert_parallel

ROWS, SEQ = 2, 8  # per rank


def spec_for(case: str) -> ModelSpec:
    return ModelSpec(
        name="ep-check",
        vocab_size=32,
        d_model=16,
        n_layers=2,
        n_heads=2,
        d_ff=32,
        max_seq_len=SEQ,
        mlp="swiglu",
        norm="rmsnorm",
        position="rope",
        n_experts=4,
        experts_per_token=1 if case == "idle" else 2,
        router_bias=case == "idle",
    )


def loss_of(model, x):
    logits = model(x)[0]  # (B, T, V)
    return logits.float().square().mean(), logits


def main(rank: int, world: int, ep: int, store: str, out: str, cases: str) -> None:
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    results = {case: check(rank, world, ep, case) for case in cases.split(",")}
    with open(out, "w") as f:
        json.dump(results, f)
    dist.barrier()
    dist.destroy_process_group()


def check(rank: int, world: int, ep: int, case: str) -> dict:
    """One case: a fresh model (seed 3), sharded, one forward and backward against the
    reference; what main writes for it."""
    spec = spec_for(case)
    model = build_model(spec, seed=3, recompute="full" if case == "recompute" else "none")
    if case == "idle":
        with torch.no_grad():
            for layer in model.modules():
                if isinstance(layer, MoE):
                    layer.score_bias[0] = 1e4  # every token's choice: expert 0
    reference = copy.deepcopy(model)
    x = torch.randint(
        0, spec.vocab_size, (world * ROWS, SEQ), generator=torch.Generator().manual_seed(5)
    )
    mine = x[rank * ROWS : (rank + 1) * ROWS]
    mesh = torch.distributed.device_mesh.init_device_mesh("cpu", (world,), mesh_dim_names=("dp",))
    layout = expert_parallel.shard_experts(model, expert_parallel.expert_groups(mesh, ep))
    loss, logits = loss_of(model, mine)
    loss.backward()
    tally = expert_parallel.take_all_to_all_bytes(model)
    # the reference: each rank's rows through the whole model, gradients summed
    want_logits = None
    for r in range(world):
        ref_loss, ref_logits = loss_of(reference, x[r * ROWS : (r + 1) * ROWS])
        ref_loss.backward()
        if r == rank:
            want_logits = ref_logits.detach()
    ref_params = dict(reference.named_parameters())
    members = layout.groups.members
    # the expert group's members' rows only reach this rank's experts
    group_rows = [r for r in range(world) if r in members]
    grad_diff = 0.0
    zero_grads = []
    for name, p in model.named_parameters():
        if name in layout.expert_names:
            want = _group_grad(reference, spec, x, name, group_rows) if world > ep else None
            want = ref_params[name].grad if want is None else want
            grad_diff = max(grad_diff, float((p.grad - want).abs().max()))
            zero_grads.append(bool(p.grad is not None and not p.grad.any()))
    return {
        "output_diff": float((logits.detach() - want_logits).abs().max()),
        "expert_grad_diff": grad_diff,
        "expert_grads_all_zero": all(zero_grads),
        "token_bytes": tally.token_bytes,
        "calls": tally.calls,
        "expert_params": sum(
            p.numel() for n, p in model.named_parameters() if n in layout.expert_names
        ),
    }


def _group_grad(reference, spec, x, name, rows):
    """The gradient of `name` summed over the losses of the ranks `rows` only."""
    twin = copy.deepcopy(reference)
    twin.zero_grad(set_to_none=True)
    for r in rows:
        loss_of(twin, x[r * ROWS : (r + 1) * ROWS])[0].backward()
    return dict(twin.named_parameters())[name].grad


if __name__ == "__main__":
    rank, world, ep, store, out, cases = sys.argv[1:]
    main(int(rank), int(world), int(ep), store, out, cases)
