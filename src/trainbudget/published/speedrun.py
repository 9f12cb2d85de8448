"""Small GPT training runs on one 8 x H100 node from the modded-nanogpt "NanoGPT speedrun"
records (github.com/KellerJordan/modded-nanogpt, records/track_1_short): the llm.c GPT-2 124M
baseline, a 124M model trained with AdamW under PyTorch DDP + torch.compile, and the 1.5B
scale-up.

Each record's log holds its whole training script and, per step, `step_avg` = the training time
over the steps since step 10 (validation excluded: the script stops the clock around it), so the
last line is a steady-state seconds-per-step over thousands of steps. The logs also print
nvidia-smi (8 x "NVIDIA H100 80GB HBM3") and the PyTorch version.
"""

from __future__ import annotations

from trainbudget.published.record import Layout, Measurement, PublishedRun, architecture, preset

_REPO = "github.com/KellerJordan/modded-nanogpt"


def _speedrun_gpt(name: str, n_layers: int, d_model: int, n_heads: int, source: str):
    """The speedrun's October-2024 GPT: no biases, RMSNorm without weights (pre-norm, final
    norm, and QK-norm on each head), RoPE, a 4h ReLU^2 MLP, the head tied to the embedding,
    GPT-2 BPE padded to 50304."""
    return architecture(
        name=name, source=source, vocab_size=50304, d_model=d_model, n_layers=n_layers,
        n_heads=n_heads, n_kv_heads=n_heads, d_ff=4 * d_model, max_seq_len=1024, mlp="gelu",
        norm="rmsnorm", position="rope", tied_embeddings=True, bias=False, dropout=False,
    )  # fmt: skip


_ARCH_NOTE = (
    "Model read from the script in the log: nn.Linear(..., bias=False) everywhere, "
    "F.rms_norm without weights before attention and MLP and at the end (RMSNorm with no "
    "parameters; 'rmsnorm' here adds d_model weights per norm, a rounding error), QK-norm "
    "(also weightless), rotary embeddings, MLP c_fc 4h -> relu().square() -> c_proj (two "
    "matrices: mlp='gelu' has the same shapes), wte.weight = lm_head.weight, vocabulary "
    "50304 ('we extend to nearest multiple of 128'). torch.autocast(bfloat16) over fp32 "
    "parameters: precision amp-bf16. DDP(model) around torch.compile(model); attention is "
    "F.scaled_dot_product_attention(is_causal=True) (PyTorch's flash kernel on H100)."
)

# fmt: off
SPEEDRUN: tuple[PublishedRun, ...] = (
    # records/track_1_short/2024-10-13_llmc/README.md: "This is a log produced by running the
    # current version of Andrej Karpathy's llm.c, as of October 13th 2024. It was run on a node
    # with 8x H100 HBM3 according to the instructions here [llm.c discussion #481]. The median
    # per-step time was 139ms. The total number of training tokens is 10.26B."
    # main.log: "s:19560 tel:3.2722" (19,560 steps).
    PublishedRun(
        id="speedrun-llmc-gpt2-124m-8gpu",
        source=(
            f"Jordan et al., modded-nanogpt NanoGPT speedrun, {_REPO} "
            "records/track_1_short/2024-10-13_llmc/README.md (record #1 'llm.c baseline' of "
            "the README's world-record table) and main.log; layout from karpathy/llm.c "
            "scripts/run_gpt2_124M.sh."
        ),
        source_key="jordan-modded-nanogpt",
        framework="other",
        framework_source="the record's README: 'Andrej Karpathy's llm.c' (a C/CUDA trainer, "
        "not PyTorch), run 'according to the instructions' of llm.c discussion #481",
        model=preset("gpt2", vocab_size=50304),
        seq_len=1024, gpu="h100-sxm", n_gpus=8, gpus_per_node=8,
        layout=Layout(
            tp=1, pp=1, dp=8, sp=False, recompute="none", zero=1, micro_batch=64,
            global_batch=512, flash_attention=True,
        ),
        measured=Measurement(iteration_seconds=0.139),
        # llm.c's train_gpt2.cu, the code the record ran, as the karpathy-llmc rows
        loss_kernel="in-place-fused-classifier",
        assumed=frozenset({
            "model.vocab_size", "layout.micro_batch", "layout.recompute", "layout.zero",
            "layout.flash_attention",
        }),
        notes=(
            "8 x H100 80GB HBM3 (SXM), one node. 'Median per-step time was 139ms' (stated). "
            "Global batch: 10.26B tokens / 19,560 steps = 524.5K tokens = 512 x 1024 (llm.c's "
            "-d 524288 -t 1024). GPT-2 124M (preset) with llm.c's padded vocabulary 50304 "
            "(Vp). Not in the record, from llm.c's scripts/run_gpt2_124M.sh (the 8-GPU recipe "
            "of that discussion): 'make train_gpt2cu USE_CUDNN=1' (cuDNN flash attention), "
            "mpirun -np 8 ... -b 64 -t 1024 -d 524288 (micro-batch 64, no accumulation) -r 0 "
            "(no recomputation) -z 1 (ZeRO-1 optimizer sharding); llm.c keeps bf16 weights "
            "with fp32 master weights (bf16-mixed). llm.c is its own CUDA code: framework "
            "'other' (predicted with the framework-neutral row)."
        ),
    ),
    # records/track_1_short/2024-10-29_Optimizers/README.md: "This is a comparison between the
    # four best optimizers ... compared using the 10/18/24 NanoGPT speedrunning record.
    # Reproducible logs: * [Adam](95a9fd44-...txt)"; the log: "Running pytorch 2.5.0+cu124",
    # "batch_size : int = 8*64", "device_batch_size : int = 64", "sequence_length : int = 1024",
    # "GPT(GPTConfig(vocab_size=num_vocab, n_layer=12, n_head=6, n_embd=768))",
    # "optimizer2 = torch.optim.AdamW(raw_model.transformer.h.parameters(), ...)",
    # "step:5100/5100 val_loss:3.3406 train_time:705525ms step_avg:138.61ms"
    PublishedRun(
        id="speedrun-adamw-124m-8gpu",
        source=(
            f"Jordan et al., modded-nanogpt NanoGPT speedrun, {_REPO} "
            "records/track_1_short/2024-10-29_Optimizers/README.md, section 'Adam', log "
            "95a9fd44-7c13-49c7-b324-3e7d9e23a499.txt (last line, step_avg)."
        ),
        source_key="jordan-modded-nanogpt",
        framework="pytorch-ddp",
        compiled=True,  # 'model = torch.compile(model)'; GPT.forward returns the loss
        framework_source="the log's script: 'model = torch.compile(model)', 'model = "
        "DDP(model, device_ids=[ddp_local_rank])', 'Running pytorch 2.5.0+cu124'",
        model=_speedrun_gpt(
            "speedrun-gpt-124m", 12, 768, 6,
            f"{_REPO} records/track_1_short/2024-10-29_Optimizers/95a9fd44-...txt (GPTConfig "
            "n_layer=12, n_head=6, n_embd=768, vocab_size=50304)",
        ),
        seq_len=1024, gpu="h100-sxm", n_gpus=8, gpus_per_node=8,
        layout=Layout(
            tp=1, pp=1, dp=8, sp=False, recompute="none", zero=0, micro_batch=64,
            global_batch=512, flash_attention=True,
        ),
        precision="amp-bf16",
        measured=Measurement(iteration_seconds=0.13861),
        notes=(
            "8 x H100 80GB HBM3 (the log's nvidia-smi). Global batch 8*64 = 512 sequences of "
            "1024, device batch 64: no accumulation. AdamW (fused) on every parameter, the "
            "optimizer the project models. step_avg 138.61 ms over steps 11-5100, validation "
            "time excluded by the script. " + _ARCH_NOTE
        ),
    ),
    # records/track_1_short/2024-10-20_ScaleUp1B/ad8d7ae5-...txt (the README's 'reproducible
    # log' for the 1.5B scale-up): "batch_size : int = 8*60", "device_batch_size : int = 12",
    # "sequence_length : int = 1024", "GPT(GPTConfig(vocab_size=num_vocab, n_layer=52,
    # n_head=12, n_embd=1536))", "Running pytorch 2.4.1+cu121",
    # "step:20344/20344 val_loss:2.7297 train_time:34957570ms step_avg:1719.17ms"
    PublishedRun(
        id="speedrun-muon-1.5b-8gpu",
        source=(
            f"Jordan et al., modded-nanogpt NanoGPT speedrun, {_REPO} README section 'Q: ... "
            "it probably won't scale' (the 1.5B scale-up) and its log "
            "records/track_1_short/2024-10-20_ScaleUp1B/ad8d7ae5-7b2d-4ee9-bc52-f912e9174d7a"
            ".txt (last line, step_avg)."
        ),
        source_key="jordan-modded-nanogpt",
        framework="pytorch-ddp",
        compiled=True,  # 'model = torch.compile(model)'; GPT.forward returns the loss
        framework_source="the log's script: 'model = torch.compile(model)', 'model = "
        "DDP(model, device_ids=[ddp_local_rank])', 'Running pytorch 2.4.1+cu121'",
        model=_speedrun_gpt(
            "speedrun-gpt-1.5b", 52, 1536, 12,
            f"{_REPO} records/track_1_short/2024-10-20_ScaleUp1B/ad8d7ae5-...txt (GPTConfig "
            "n_layer=52, n_head=12, n_embd=1536, vocab_size=50304)",
        ),
        seq_len=1024, gpu="h100-sxm", n_gpus=8, gpus_per_node=8,
        layout=Layout(
            tp=1, pp=1, dp=8, sp=False, recompute="none", zero=0, micro_batch=12,
            global_batch=480, flash_attention=True,
        ),
        precision="amp-bf16",
        measured=Measurement(iteration_seconds=1.71917),
        notes=(
            "8 x H100 80GB HBM3 (the log's nvidia-smi). Global batch 8*60 = 480 sequences of "
            "1024, device batch 12: 5 accumulation steps. Optimizer: Muon (momentum 0.95, "
            "five Newton-Schulz iterations in bf16 on every hidden matrix, the work spread "
            "over the 8 ranks) for the transformer blocks and AdamW for the head; the project "
            "models Adam, so Muon's orthogonalization is time the model does not count (the "
            "README puts Muon's overhead at '<2% wallclock' for the 124M speedrun) and its "
            "single momentum buffer makes memory smaller. step_avg over 20,344 steps. "
            + _ARCH_NOTE
        ),
    ),
)
# fmt: on
