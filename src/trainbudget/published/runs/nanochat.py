"""Karpathy's nanochat pre-training runs on one 8 x H100 node (github.com/karpathy/nanochat): the
$1000-tier d32 model as run1000.sh documents it (October 2025), and the four records of the
"Time-to-GPT-2" leaderboard (dev/LEADERBOARD.md, January-February 2026: d24 in bf16, d26 in FP8
at 0.5M and 1M-token batches).

nanochat is a PyTorch trainer of its own: torch.compile over the whole model, bf16 autocast over
fp32 weights, Flash Attention 3, and optimizers that shard their state over the 8 ranks (Muon
for the matrices, AdamW for embeddings and head, both reduce-scattering the gradients after the
last micro-batch: ZeRO-2). `--fp8` converts every Linear whose dimensions divide by 16 to
torchao's Float8Linear with tensorwise scaling (lm_head included).

The leaderboard's `total_training_time` sums the wall time of every step after the first ten
(scripts/base_train.py at each run's commit: "only count the time after the first 10 steps"),
evaluation excluded, so seconds per step = total_training_time / (steps - 11).
"""

from __future__ import annotations

from trainbudget.core.spec.model_spec import ModelSpec
from trainbudget.core.units import GB
from trainbudget.published.record import Layout, Measurement, PublishedRun, architecture

_REPO = "github.com/karpathy/nanochat"
SEQ_LEN = 2048


def nanochat_gpt(depth: int, vocab_size: int, commit: str) -> ModelSpec:
    """nanochat's GPT at `depth`: width 64 x depth, 128-wide heads, a 4x relu^2 MLP (two
    matrices, mlp='gelu' has their shapes), RMSNorm without weights, rotary, QK-norm, untied
    head, no biases (nanochat/gpt.py and scripts/base_train.py at `commit`)."""
    d_model = 64 * depth
    return architecture(
        name=f"nanochat-d{depth}", source=f"{_REPO} nanochat/gpt.py at commit {commit}",
        vocab_size=vocab_size, d_model=d_model, n_layers=depth, n_heads=d_model // 128,
        n_kv_heads=d_model // 128, d_ff=4 * d_model, max_seq_len=SEQ_LEN, mlp="gelu",
        norm="rmsnorm", position="rope", tied_embeddings=False, bias=False, dropout=False,
    )  # fmt: skip


def _layout(micro: int, global_batch: int) -> Layout:
    """Data parallel over one node; ZeRO-2 (the optimizers' reduce-scatter and sharded state);
    no recomputation (base_train.py has none); FA3."""
    return Layout(
        tp=1, pp=1, dp=8, sp=False, recompute="none", zero=2, micro_batch=micro,
        global_batch=global_batch, flash_attention=True,
    )  # fmt: skip


def step_seconds(total_training_time: float, steps: int) -> float:
    """Seconds per step from the leaderboard's summary: steps 11 .. steps-1 are timed."""
    return total_training_time / (steps - 11)


_FRAMEWORK = (
    "nanochat's own trainer: scripts/base_train.py 'model = torch.compile(model, "
    "dynamic=False)', torchrun over 8 ranks, optimizers DistMuon/DistAdamW ('sharding "
    "optimizer states across ranks (ZeRO-2 style)' in nanochat/optim.py)"
)
_ARCH_2026 = (
    "Not expressible and left out of the model: value embeddings on every other layer (an "
    "embedding lookup mixed into V through a 32-input gate: parameters and Adam state, no "
    "matmul), per-layer residual and x0 scalars, the logit softcap, and the sliding window "
    "'SSSL' (three layers in four attend to the last 1024 tokens only: the model times full "
    "causal attention over 2048 there, about 2 % of the step too slow at this width). Muon "
    "updates the matrices (a few Newton-Schulz iterations in bf16, spread over the ranks); "
    "the project models Adam. GPU: '8XH100' (the leaderboard); SXM assumed (the script's MFU "
    "uses 989e12, 'bfloat16 H100 SXM'). Vocabulary 32768 (scripts/tok_train.py default, "
    "2^15, already a multiple of 64)."
)

# fmt: off
NANOCHAT: tuple[PublishedRun, ...] = (
    # run1000.sh at commit fae3aca (2025-10-15), comments: "Running the base_train.py script with
    # --depth=32, I saw that --device_batch_size=16 runs out of memory, but
    # --device_batch_size=8 fits. Inspecting `nvidia-smi` during training, I saw all GPUs were at
    # about 78/80GB VRAM ... good MFU at ~50%." "Vocab size: 65,536", "num_layers: 32",
    # "model_dim: 2048", "num_heads: 16", "Tokens / micro-batch / rank: 8 x 2048 = 16,384",
    # "Total batch size 524,288 => gradient accumulation steps: 4", "Estimated FLOPs per token:
    # 1.207960e+10", "step 00005/71680 ... dt: 1572.76ms ... mfu: 50.89", "each step takes
    # 1.574s".
    PublishedRun(
        id="nanochat-d32-8gpu",
        source=(
            f"Karpathy, nanochat, {_REPO} run1000.sh at commit fae3aca (2025-10-15), the "
            "comment section '2) Determine the device_batch_size that fits' and '3) validate "
            "that the runtime fits our budget'."
        ),
        source_key="karpathy-nanochat",
        framework="pytorch-native",
        compiled=True,  # base_train.py: model = torch.compile(model), the loss in its forward
        framework_source=_FRAMEWORK,
        model=nanochat_gpt(32, 65536, "fae3aca"),
        seq_len=SEQ_LEN, gpu="h100-sxm", n_gpus=8, gpus_per_node=8,
        layout=_layout(8, 256),
        precision="amp-bf16",
        measured=Measurement(
            iteration_seconds=1.574, memory_bytes_per_gpu=78 * GB, memory_measure="device"
        ),
        assumed=frozenset({"gpu"}),
        notes=(
            "8 x H100 ('an 8XH100 node'; SXM: base_train.py at fae3aca counts its MFU against "
            "'989e12 ... bfloat16 H100 SXM'). d32: 32 layers, width 2048, 16 heads, "
            "vocabulary 65536 (the log lines quoted). Device batch 8 x 2048 tokens, 524,288 "
            "tokens a step = 256 sequences, 4 accumulation steps. Step 1.574 s as stated "
            "(logged dt 1571.88 and 1572.76 ms at steps 4-5; MFU 50.92 = 1.20796e10 FLOPs a "
            "token x 524,288 / 1.57188 s / (8 x 989e12), checked in tests). Memory: 'about "
            "78/80GB VRAM' read from nvidia-smi, recorded as 78 GB: what the process holds "
            "(the caching allocator's reserve and the CUDA context included), an upper "
            "bound of the allocated peak. The October model has no value embeddings or "
            "sliding window: QK-norm, relu^2, rotary, weightless RMSNorm, untied, softcap "
            "15. Muon for the matrices, AdamW for embedding and head (the project models "
            "Adam; Muon keeps one momentum buffer). torch.autocast(bfloat16) over fp32 "
            "weights: amp-bf16."
        ),
    ),
    # dev/LEADERBOARD.md "Run 1": "Achieved Jan 29 2026 on commit `348fbb3`", "--depth=24
    # --device-batch-size=16 ... --target-param-data-ratio=12", "step 16704",
    # "total_training_time 10949.46713".
    PublishedRun(
        id="nanochat-d24-bf16-8gpu",
        source=(
            f"Karpathy, nanochat, {_REPO} dev/LEADERBOARD.md, section 'Run 1' (Jan 29 2026, "
            "commit 348fbb3): launch command and wandb run summary."
        ),
        source_key="karpathy-nanochat",
        framework="pytorch-native",
        compiled=True,  # base_train.py: model = torch.compile(model), the loss in its forward
        framework_source=_FRAMEWORK,
        model=nanochat_gpt(24, 32768, "348fbb3"),
        seq_len=SEQ_LEN, gpu="h100-sxm", n_gpus=8, gpus_per_node=8,
        layout=_layout(16, 256),
        precision="amp-bf16",
        measured=Measurement(iteration_seconds=step_seconds(10949.46713, 16704)),
        assumed=frozenset({"gpu"}),
        notes=(
            "d24: width 1536, 12 heads of 128 (base_train.py: model_dim = depth x 64, "
            "head_dim 128). Device batch 16 x 2048; total batch 524,288 tokens (the default) "
            "= 256 sequences, 2 accumulation steps. 10949.47 s over the 16,693 timed steps "
            "(16,704 - 11) = 0.6559 s a step. bf16 autocast over fp32 weights. " + _ARCH_2026
        ),
    ),
    # "Run 2": "Achieved Feb 2 2026 on commit `a67eba3`", "--depth=26 --device-batch-size=16
    # ... --fp8", "step 14889", "total_training_time 10493"; "`--fp8` ... causes all Linear
    # layers (other than the gates) to be switched to fp8 training using `torchao` with
    # tensorwise fp8 scaling."
    PublishedRun(
        id="nanochat-d26-fp8-8gpu",
        source=(
            f"Karpathy, nanochat, {_REPO} dev/LEADERBOARD.md, section 'Run 2' (Feb 2 2026, "
            "commit a67eba3): launch command and result."
        ),
        source_key="karpathy-nanochat",
        framework="pytorch-native",
        compiled=True,  # base_train.py: model = torch.compile(model), the loss in its forward
        framework_source=_FRAMEWORK,
        model=nanochat_gpt(26, 32768, "a67eba3"),
        seq_len=SEQ_LEN, gpu="h100-sxm", n_gpus=8, gpus_per_node=8,
        layout=_layout(16, 256),
        precision="fp8",
        measured=Measurement(iteration_seconds=step_seconds(10493, 14889)),
        assumed=frozenset({"gpu"}),
        notes=(
            "d26: width 1664, 13 heads of 128. Device batch 16 x 2048, 524,288 tokens = 256 "
            "sequences, 2 accumulation steps. 10493 s over 14,878 timed steps = 0.7053 s. "
            "FP8: torchao Float8Linear, tensorwise scaling, on every Linear whose dimensions "
            "divide by 16 (base_train.py fp8_module_filter), the output head included; the "
            "project's fp8 keeps the head in bf16. " + _ARCH_2026
        ),
    ),
    # "Run 3": "Achieved Feb 5 2026 on commit `2c062aa`", "--depth=26 --device-batch-size=16
    # --total-batch-size=1048576 ... --fp8", "step 7226", "total_training_time 9922".
    PublishedRun(
        id="nanochat-d26-fp8-1m-8gpu",
        source=(
            f"Karpathy, nanochat, {_REPO} dev/LEADERBOARD.md, section 'Run 3' (Feb 5 2026, "
            "commit 2c062aa): launch command and result."
        ),
        source_key="karpathy-nanochat",
        framework="pytorch-native",
        compiled=True,  # base_train.py: model = torch.compile(model), the loss in its forward
        framework_source=_FRAMEWORK,
        model=nanochat_gpt(26, 32768, "2c062aa"),
        seq_len=SEQ_LEN, gpu="h100-sxm", n_gpus=8, gpus_per_node=8,
        layout=_layout(16, 512),
        precision="fp8",
        measured=Measurement(iteration_seconds=step_seconds(9922, 7226)),
        assumed=frozenset({"gpu"}),
        notes=(
            "As Run 2 with the total batch doubled: 1,048,576 tokens = 512 sequences, 4 "
            "accumulation steps. 9922 s over 7,215 timed steps = 1.3752 s. " + _ARCH_2026
        ),
    ),
    # "Run 4": "Achieved Feb 8 2026." (no commit named), "--depth=26 --device-batch-size=16
    # --total-batch-size=524288 ... --target-param-data-ratio=7.25 --fp8", "step 12700",
    # "total_training_time 8967".
    PublishedRun(
        id="nanochat-d26-fp8-run4-8gpu",
        source=(
            f"Karpathy, nanochat, {_REPO} dev/LEADERBOARD.md, section 'Run 4' (Feb 8 2026): "
            "launch command and result."
        ),
        source_key="karpathy-nanochat",
        framework="pytorch-native",
        compiled=True,  # base_train.py: model = torch.compile(model), the loss in its forward
        framework_source=_FRAMEWORK,
        model=nanochat_gpt(26, 32768, "aeff095"),
        seq_len=SEQ_LEN, gpu="h100-sxm", n_gpus=8, gpus_per_node=8,
        layout=_layout(16, 256),
        precision="fp8",
        measured=Measurement(iteration_seconds=step_seconds(8967, 12700)),
        assumed=frozenset({"gpu"}),
        notes=(
            "Run 2's configuration with a shorter horizon (ratio 7.25): 524,288 tokens = 256 "
            "sequences, 2 accumulation steps. 8967 s over 12,689 timed steps = 0.7067 s. The "
            "section names no commit: nanochat/gpt.py is unchanged from 2c062aa (Run 3) to the "
            "last commit before Feb 8 (aeff095, which changes only base_train.py's weight-decay "
            "scaling), so the model and step are Runs 2-3's. " + _ARCH_2026
        ),
    ),
)
# fmt: on
