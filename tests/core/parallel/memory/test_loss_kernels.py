"""The loss kernel as a framework column (`engines.LOSS_KERNELS`): what each keeps of the logits
and the head's gradients at the head stage's backward start, for one plan and for a grid.
Sizes follow each kernel's code (the rows' sources); the bytes here are those formulas, written
out by hand from the shapes."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from trainbudget.core.ops import numpy_ops
from trainbudget.core.parallel.layout import PlanNumbers
from trainbudget.core.parallel.memory.gpu_memory import peak_bytes
from trainbudget.core.parallel.memory.gpu_peak import BACKWARD_STARTS, gpu_peak
from trainbudget.core.parallel.plan import Plan
from trainbudget.core.spec.frameworks import FRAMEWORKS, GENERIC
from trainbudget.core.spec.precision import get_optimizer, get_precision
from trainbudget.core.spec.presets import get_preset

SPEC = get_preset("llama-3-8b")
KW = dict(precision=get_precision("bf16-mixed"), optimizer=get_optimizer("adam"))
# Bekman's long-context layout (published.runs.mlengineering): ZeRO-3 on 8, checkpointing
PLAN = Plan(dp=8, tp=1, pp=1, zero=3, micro_batch=1, grad_accum=1, recompute="full")
FUSED = "fused-linear-cross-entropy"


def backward_start(framework, seq_len: int):
    peak = gpu_peak(
        SPEC, PlanNumbers.of(PLAN), stage="only", seq_len=seq_len, framework=framework, **KW
    )
    return next(p for p in peak.phases if p.phase == BACKWARD_STARTS[2])


@pytest.mark.parametrize("seq_len", [8192, 262144])
def test_a_fused_linear_loss_holds_a_chunk_and_the_head_gradients_not_the_logits(seq_len):
    torch_ce = backward_start(GENERIC, seq_len)
    fused = backward_start(dataclasses.replace(GENERIC, loss_kernel=FUSED), seq_len)
    tokens, vocab, d = seq_len, SPEC.vocab_size, SPEC.d_model
    # torch's cross-entropy: 16-bit logits and the fp32 log-probabilities saved, two fp32
    # gradients at its backward's start (the profile matrix's MemTracker measurement)
    torch_loss = tokens * vocab * (2 + 4) + tokens * vocab * 2 * 4
    # Liger: the 16-bit head weight gradient kept (the input's gradient replaces the saved
    # input), one chunk of about tokens x d 16-bit logits at the forward's end
    fused_loss = vocab * d * 2 + tokens * d * 2
    assert torch_ce.total_bytes - fused.total_bytes == pytest.approx(torch_loss - fused_loss)


def test_no_framework_row_changes_its_loss_by_the_new_row():
    # the rows keep their kernels: only a run or a flag picks the fused one
    assert FUSED not in {fw.loss_kernel for fw in FRAMEWORKS.values()}


def test_the_grid_equals_one_plan_at_a_time_under_the_fused_loss():
    fw = dataclasses.replace(FRAMEWORKS["deepspeed"], loss_kernel=FUSED)
    plans = [dataclasses.replace(PLAN, micro_batch=b) for b in (1, 2)]
    kw = dict(seq_len=32768, framework=fw, **KW)
    grid = peak_bytes(SPEC, PlanNumbers.of_many(plans), xp=numpy_ops(), **kw)
    one = [peak_bytes(SPEC, p, **kw) for p in plans]
    np.testing.assert_allclose(grid, one, rtol=1e-12)


def test_a_chunked_loss_saves_fp32_log_probabilities_and_backs_up_one_chunk_at_a_time():
    seq_len = 32768
    torch_ce = backward_start(GENERIC, seq_len)
    chunked = backward_start(
        dataclasses.replace(GENERIC, loss_kernel="chunked-cross-entropy"), seq_len
    )
    logits = seq_len * SPEC.vocab_size
    # torchtune's 8 chunks: no 16-bit logits kept; a chunk's two fp32 gradients and its
    # 16-bit one instead of the whole logits' two fp32 gradients
    saved = logits * 2 + logits * 2 * 4 - logits / 8 * (2 * 4 + 2)
    assert torch_ce.total_bytes - chunked.total_bytes == pytest.approx(saved)


def test_llmc_s_in_place_classifier_keeps_only_the_16_bit_logits():
    seq_len = 8192
    torch_ce = backward_start(GENERIC, seq_len)
    in_place = backward_start(
        dataclasses.replace(GENERIC, loss_kernel="in-place-fused-classifier"), seq_len
    )
    # no fp32 log-probabilities saved, no fp32 gradient: the gradient overwrites the logits
    logits = seq_len * SPEC.vocab_size
    assert torch_ce.total_bytes - in_place.total_bytes == pytest.approx(logits * 3 * 4)


GATHERED = "gathered-16bit-cross-entropy"


def test_a_head_gathered_to_every_tp_rank_holds_the_whole_vocabulary_s_logits():
    # KempnerForge's TP head (ColwiseParallel(output_layouts=Replicate())): each of 4 ranks
    # runs F.cross_entropy on all tokens x V bf16 logits -- kept, log-probabilities saved, two
    # 16-bit gradients at the backward's start: 4 x 2 bytes a logit. llm.c's in-place kernel
    # keeps only the rank's V/4 16-bit logits. GENERIC's engines run no loss parallel.
    tp4 = Plan(dp=2, tp=4, pp=1, zero=3, micro_batch=1, grad_accum=1, recompute="full")
    seq_len, tokens, vocab = 4096, 4096, SPEC.vocab_size

    def start(kernel):
        fw = dataclasses.replace(GENERIC, loss_kernel=kernel)
        peak = gpu_peak(
            SPEC, PlanNumbers.of(tp4), stage="only", seq_len=seq_len, framework=fw, **KW
        )
        return next(p for p in peak.phases if p.phase == BACKWARD_STARTS[2]).total_bytes

    gathered = tokens * vocab * 4 * 2
    in_place = tokens * vocab / 4 * 2
    assert start(GATHERED) - start("in-place-fused-classifier") == pytest.approx(
        gathered - in_place, rel=1e-12
    )


def test_the_gathered_loss_equals_the_vocabulary_parallel_count_without_tp():
    # one rank holds the whole vocabulary either way: only the dtype differs -- 16-bit
    # log-probabilities and gradients in place of torch-cross-entropy's fp32 ones
    torch_ce = backward_start(GENERIC, 8192)
    gathered = backward_start(dataclasses.replace(GENERIC, loss_kernel=GATHERED), 8192)
    logits = 8192 * SPEC.vocab_size
    assert torch_ce.total_bytes - gathered.total_bytes == pytest.approx(logits * 3 * (4 - 2))


@pytest.mark.torch
@pytest.mark.parametrize(("kernel", "cast"), [(GATHERED, False), ("torch-cross-entropy", True)])
def test_the_kernel_rows_count_what_memtracker_sees_of_torch_s_cross_entropy(kernel, cast):
    # F.cross_entropy on 16-bit logits (KempnerForge) and on their fp32 cast (the reference):
    # torch's own MemTracker sizes what is saved (ACT, the caller's logits included) and
    # what the backward creates (TEMP), against the row's logit-sized tensor counts
    torch = pytest.importorskip("torch")
    mem_tracker = pytest.importorskip("torch.distributed._tools.mem_tracker")
    from trainbudget.core.spec.loss_kernels import get_loss_kernel

    row, n, v = get_loss_kernel(kernel), 256, 2048
    x = torch.randn(n, v, dtype=torch.bfloat16, requires_grad=True)
    y = torch.randint(0, v, (n,))
    tracker = mem_tracker.MemTracker()
    with tracker:
        logits = x * 1.0  # the logits the caller holds through the backward
        loss = torch.nn.functional.cross_entropy(logits.float() if cast else logits, y)
        loss.backward()
    (peak,) = tracker.get_tracker_snapshot("peak").values()
    by_type = {str(k).rsplit(".", 1)[-1]: b for k, b in peak.items()}
    logit, scalar_slack = n * v, 64  # the loss scalar and the like
    saved = logit * (row.keeps_logits * 2 + row.saved_16bit_tensors * 2)
    saved += logit * row.saved_fp32_tensors * 4
    made = logit * (row.backward_16bit_tensors * 2 + row.backward_fp32_tensors * 4)
    assert by_type["ACT"] == pytest.approx(saved, abs=scalar_slack)
    assert by_type["TEMP"] == pytest.approx(made, abs=scalar_slack)
