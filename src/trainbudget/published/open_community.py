"""Open community pre-training runs on A100s: TinyLlama (FSDP), Pythia-1B (GPT-NeoX) and
StarCoderBase (BigCode's Megatron fork).

TinyLlama states its throughput (scored); Pythia's and StarCoder's come from their GPU-hours and
tokens (tokens / (GPU-hours x 3600): a run average, restarts and evaluation included), so those
two are listed but not scored (validation.EXCLUDED), though their layouts are published.
"""

from __future__ import annotations

from trainbudget.published.llama_reports import tokens_per_second_per_gpu
from trainbudget.published.record import Layout, Measurement, PublishedRun, architecture

PYTHIA_TOKENS = 299_892_736_000  # EleutherAI/pythia README: "299,892,736,000 ~= 299.9B tokens"

# fmt: off
TINYLLAMA = PublishedRun(
    # jzhang38/TinyLlama README, 'Training Details': "Layers: 22, Heads: 32, Query Groups: 4,
    # Embedding Size: 2048, Intermediate Size (Swiglu): 5632", "Sequence Length | 2048",
    # "Batch Size | 2 million tokens (2048 * 1024)", "Hardware | 16 A100-40G GPUs".
    # 'Blazingly Fast': "multi-gpu and multi-node distributed training with FSDP", "flash
    # attention 2", "we achieve a throughput of 24k tokens per second per A100-40G GPU, which
    # translates to 56% model flops utilization without activation checkpointing", "train
    # with a per-gpu batch size of 16k tokens"; table: "TinyLlama-1.1B | 3456" (A100 GPU hours
    # taken on 300B tokens).
    id="tinyllama-1.1b-16gpu",
    source=(
        "Zhang et al. 2024, TinyLlama, github.com/jzhang38/TinyLlama README.md, sections "
        "'Training Details' (table) and 'Blazingly Fast' (throughput sentence and GPU-hours "
        "table); FSDP settings from pretrain/tinyllama.py."
    ),
    source_key="zhang-2024-tinyllama",
    framework="pytorch-fsdp",
    framework_source="README 'Blazingly Fast': 'multi-gpu and multi-node distributed training "
    "with FSDP' (pretrain/tinyllama.py: Lightning Fabric's FSDPStrategy over PyTorch FSDP)",
    model=architecture(
        name="tinyllama-1.1b",
        source="TinyLlama README 'Training Details' ('exactly the same architecture and "
        "tokenizer as Llama 2': vocab 32000, RMSNorm, RoPE, untied head, no biases)",
        vocab_size=32000, d_model=2048, n_layers=22, n_heads=32, n_kv_heads=4, d_ff=5632,
        max_seq_len=2048, mlp="swiglu", norm="rmsnorm", position="rope",
        tied_embeddings=False, bias=False, dropout=False,
    ),
    seq_len=2048, gpu="a100-40gb", n_gpus=16, gpus_per_node=8,
    layout=Layout(
        tp=1, pp=1, dp=16, sp=False, recompute="none", zero=3,
        micro_batch=8, global_batch=1024, flash_attention=True,
    ),
    measured=Measurement(
        tokens_per_second_per_gpu=24000, mfu=0.56,
        flops_note="lit-gpt estimate_flops; convention not stated",
    ),
    assumed=frozenset({"gpus_per_node", "layout.zero"}),
    notes=(
        "A100-40G. 16 GPUs and 2M-token batch (1024 x 2048) stated; micro-batch 8 = the "
        "'per-gpu batch size of 16k tokens' / 2048; GA = 1024 / (16 x 8) = 8. FSDP: "
        "pretrain/tinyllama.py's FSDPStrategy sets no sharding_strategy, i.e. FULL_SHARD "
        "(zero=3), activation_checkpointing_policy=None; that file's defaults are 8 devices and "
        "global batch 512, so the 16-GPU run's sharding is assumed the same. 2 nodes of 8 "
        "assumed. Check: the README's 3456 GPU-hours per 300B tokens give 24,113 tokens/s/GPU. "
        "The 56% MFU's FLOP count is lit-gpt's, not named (kept for reference, not scored)."
    ),
)

PYTHIA_1B = PublishedRun(
    # EleutherAI/pythia models/1B/pythia-1b.yml: "pipe-parallel-size": 1,
    # "model-parallel-size": 1, "num-layers": 16, "hidden-size": 2048, "num-attention-heads":
    # 8, "seq-length": 2048, "pos-emb": "rotary", "rotary-pct": 0.25, "no-weight-tying":
    # true, "gpt-j-residual": true, "attention-config": [[["flash"], 16]], "zero_optimization":
    # {"stage": 1, ...}, "# batch size (trained on 64 gpus)", "train_micro_batch_size_per_gpu":
    # 16, "gas": 1, "checkpoint-activations": true, "fp16": {... "enabled": true ...}
    # TinyLlama README table: "[Pythia-1.0B] | 4830" (A100 GPU hours taken on 300B tokens);
    # "The Pythia number comes from their paper."
    id="pythia-1b-64gpu",
    source=(
        "Biderman et al. 2023, 'Pythia', arXiv:2304.01373, GPU-hours table (appendix), as "
        "quoted in the jzhang38/TinyLlama README table 'A100 GPU hours taken on 300B tokens' "
        "(row 'Pythia-1.0B'); layout from EleutherAI/pythia models/1B/pythia-1b.yml."
    ),
    source_key="biderman-2023-pythia",
    framework="megatron-deepspeed",
    framework_source="EleutherAI/pythia README: the configs were used 'to train these models "
    "within the GPT-NeoX library', Megatron's model code on DeepSpeed (ZeRO-1 in the config)",
    model=architecture(
        name="pythia-1b",
        source="EleutherAI/pythia models/1B/pythia-1b.yml (16 layers, 2048 hidden, 8 heads, "
        "rotary on 25% of each head, untied); GPT-NeoX: LayerNorm, 4h GeLU, biases; vocab "
        "50304 (the HF config's padded GPT-NeoX-20B tokenizer)",
        vocab_size=50304, d_model=2048, n_layers=16, n_heads=8, n_kv_heads=8, d_ff=8192,
        max_seq_len=2048, mlp="gelu", norm="layernorm", position="rope",
        tied_embeddings=False, bias=True, dropout=False,
    ),
    seq_len=2048, gpu="a100-40gb", n_gpus=64, gpus_per_node=8,
    layout=Layout(
        tp=1, pp=1, dp=64, sp=False, recompute="full", zero=1,
        micro_batch=16, global_batch=1024, flash_attention=True,
    ),
    measured=Measurement(
        tokens_per_second_per_gpu=tokens_per_second_per_gpu(PYTHIA_TOKENS, 4830),
    ),
    assumed=frozenset({"gpus_per_node", "model.vocab_size"}),
    notes=(
        "A100 SXM4 40GB (Pythia paper). 64 GPUs x micro 16 x GA 1 = 1024 sequences of 2048 "
        "(the Pythia batch). DeepSpeed ZeRO-1, full activation checkpointing "
        "(checkpoint-num-layers 1), flash attention, fp16 (trained in fp16, scored as bf16: "
        "same tensor-core peak on A100). Parallel attention and MLP (gpt-j-residual) and "
        "partial rotary change no matmul shape. GPU-hours 4830 are read from TinyLlama's "
        "quotation of the Pythia paper, not from the paper itself. tokens/s/GPU = "
        "299,892,736,000 / (4830 x 3600) = 17,247, run average."
    ),
)

STARCODER = PublishedRun(
    # StarCoder paper §5 (quoted by nl2code.github.io/posts/StarCoder): "We trained our model
    # on a GPU cluster with 512 A100 80 GB GPUs distributed across 64 nodes. We partitioned
    # the model with a 3D-parallel layout that shards the model with both tensor and pipeline
    # parallelism rank 4, requiring 16 GPUs (two nodes) for one replica. To fully leverage the
    # cluster's capabilities, we used 32-fold data parallelism. To optimize GPU utilization
    # and reduce idle compute bubbles, we maintained a micro-batch size of 1 and accumulated
    # for 16 steps, resulting in a global batch size of 512 (equivalent to 4M tokens)."
    # Pre-training GPU-hours: "The pre-training required 320,256 GPU hours".
    id="starcoderbase-15b-512gpu",
    source=(
        "Li et al. 2023, 'StarCoder: may the source be with you!', arXiv:2305.06161, §5 "
        "'Training details' (layout, as quoted by nl2code.github.io/posts/StarCoder) and the "
        "model card's 320,256 pre-training GPU-hours (as quoted in a stored secondary text)."
    ),
    source_key="li-2023-starcoder",
    framework="megatron",
    framework_source="not named in the quoted §5 text; BigCode publishes the trained model in "
    "Megatron's checkpoint format (huggingface.co/bigcode/starcoderbase-megatron, 'the "
    "Megatron-version of StarCoderBase'): their Megatron fork assumed",
    model=architecture(
        name="starcoderbase-15.5b",
        source="bigcode/starcoder config.json (GPTBigCode): n_embd 6144, n_layer 40, n_head "
        "48, multi_query true, n_inner 24576, n_positions 8192, vocab 49152, gelu; learned "
        "positions, LayerNorm, biases, tied head (transformers default)",
        vocab_size=49152, d_model=6144, n_layers=40, n_heads=48, n_kv_heads=1, d_ff=24576,
        max_seq_len=8192, mlp="gelu", norm="layernorm", position="learned",
        tied_embeddings=True, bias=True, dropout=True,
    ),
    seq_len=8192, gpu="a100-80gb", n_gpus=512, gpus_per_node=8,
    layout=Layout(
        tp=4, pp=4, dp=32, sp=True, recompute="selective", zero=1,
        micro_batch=1, global_batch=512, flash_attention=True,
    ),
    measured=Measurement(tokens_per_second_per_gpu=tokens_per_second_per_gpu(1e12, 320_256)),
    assumed=frozenset({
        "model.dropout",
        "layout.sp", "layout.recompute", "layout.zero", "layout.flash_attention", "framework",
    }),
    notes=(
        "A100 80GB, 64 nodes of 8. Layout stated: TP 4, PP 4, DP 32, micro 1, GA 16, batch 512 "
        "x 8192 = 4M tokens; StarCoderBase trained 1T tokens (abstract). Not stated, assumed: "
        "sequence parallelism, selective recompute (--recompute-activations) and the "
        "distributed optimizer, as a BigCode fine-tuning script of this 15.5B checkpoint with "
        "the same TP/PP/micro/batch sets them (--sequence-parallel --recompute-activations "
        "--use-distributed-optimizer); FlashAttention assumed (the paper's Megatron fork has "
        "it; that script turns it off for fine-tuning masks). The 320,256 GPU-hours were read "
        "from a secondary text, not the paper: tokens/s/GPU = 1e12 / (320,256 x 3600) = 867, "
        "a run average. MQA: one K/V head, replicated over the 4 TP ranks."
    ),
)
# fmt: on

COMMUNITY: tuple[PublishedRun, ...] = (TINYLLAMA, PYTHIA_1B, STARCODER)
