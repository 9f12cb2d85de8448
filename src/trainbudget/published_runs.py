"""Published large-scale LLM training runs, for validating the step-time model.

Each entry is a plain dict:

- ``id``: short unique slug
- ``source``: citation (+ arXiv/URL + table/section) and where the numbers were read
- ``model``: n_layers, d_model, n_heads, n_kv_heads, d_ff, vocab_size, seq_len,
  mlp ("gelu" = any non-gated 2-matrix MLP, "swiglu" = gated 3-matrix MLP),
  tied_embeddings, bias
- ``gpu`` (catalog name or "other:NAME"), ``n_gpus``, ``gpus_per_node``
- layout: ``tp``, ``pp``, ``dp``, ``cp``, ``vpp`` (virtual stages, 1 = not interleaved),
  ``sp`` (Megatron sequence parallelism), ``recompute`` ("none"/"selective"/"full"),
  ``zero`` (0-3; Megatron distributed optimizer = 1, FSDP full-shard = 3)
- ``global_batch`` (sequences per optimizer step), ``micro_batch``
- ``measured``: only what the source reports (iteration_seconds, tflops_per_gpu,
  tokens_per_second_per_gpu, mfu, hfu) plus the FLOP-counting convention
  (``flops_formula``) needed to turn a TFLOP/s figure back into a step time
- ``notes``: everything assumed or uncertain

Invariant: n_gpus == tp * pp * dp * cp for every entry.

FLOP conventions referenced below:

- "megatron-96Bslh2": F = 96*B*s*l*h^2 * (1 + s/(6h) + V/(16*l*h)) FLOPs per iteration
  (Narayanan et al. 2021, eq. 3 / appendix); matmuls only, non-causal attention, and it
  INCLUDES one extra forward pass for full activation recomputation (4 passes, not 3).
- "megatron-72Bslh2": F = 72*B*s*l*h^2 * (1 + s/(6h) + V/(12*l*h)): the same model without
  recomputation (3 passes), used for MFU by Korthikanti et al. 2022.
- "nemo-dgxc": per-sequence model FLOPs = s * (attention + mlp + embedding) with
  attention = 12*l*h^2*(1 + kv_groups/heads + s/h), mlp = 18*l*ffn*h (SwiGLU) or 48*l*h^2
  (4h non-gated), embedding = 6*V*h (the "Notes" section of each dgxc-benchmarking README).

Every entry was checked for internal consistency where the source gives enough to do so
(e.g. the TFLOP/s figure reproduces from the iteration time with the stated formula); the
check is described in that entry's notes.
"""

# --------------------------------------------------------------------------------------
# Shared architectures
# --------------------------------------------------------------------------------------

# Megatron-LM GPT as used by NVIDIA's scaling papers: vocabulary 51,200, sequence 2048,
# 4h GeLU MLP, biases, tied input/output embedding (Megatron GPT default).
_MEGATRON_GPT = {
    "vocab_size": 51200,
    "seq_len": 2048,
    "mlp": "gelu",
    "tied_embeddings": True,
    "bias": True,
}


def _gpt(n_layers: int, d_model: int, n_heads: int, **over) -> dict:
    model = {
        "n_layers": n_layers,
        "d_model": d_model,
        "n_heads": n_heads,
        "n_kv_heads": n_heads,
        "d_ff": 4 * d_model,
        **_MEGATRON_GPT,
    }
    model.update(over)
    return model


_KORTHIKANTI_SRC = (
    "Korthikanti et al. 2022, 'Reducing Activation Recomputation in Large Transformer "
    "Models', arXiv:2205.05198, Table 3 (configs) and Table 5 (end-to-end iteration time). "
    "Numbers read from calculon-ai/calculon calculon/megatron/validation.py (kProfile, "
    "'These profiled values are reported here: https://arxiv.org/pdf/2205.05198.pdf') and "
    "validation/<model>_{full,seqsel}.json; MFU/HFU from the NVIDIA/Megatron-LM README "
    "(2022 version) table 'Model FLOPs Utilization | Hardware FLOPs Utilization'."
)
_KORTHIKANTI_NOTES = (
    "Selene, DGX A100 80GB, fp16; data-parallel size 1 (README: 'measured using a data "
    "parallel size of one'). 'full' = tensor parallel without sequence parallelism plus "
    "full recompute (paper baseline); 'selective' rows = present work (sequence "
    "parallelism + selective recompute). Vocab 51200 assumed (Megatron default; with it "
    "72Bslh2(1+s/6h+V/12lh) over 37.83 s on 280 GPUs gives 174.9 TFLOP/s = 56.0% of 312, "
    "exactly the published MFU). vpp taken from calculon's 'pipeline_interleaving' field; "
    "the paper text with the interleaving factor was not available to confirm it."
)

_NARAYANAN_SRC = (
    "Narayanan et al. 2021, 'Efficient Large-Scale Language Model Training on GPU Clusters "
    "Using Megatron-LM', SC21, arXiv:2104.04473; text read from a markdown conversion of "
    "the paper stored in the code index (find_string 'Number of parameters (billion)')."
)

_LLAMA3_405B = {
    "n_layers": 126,
    "d_model": 16384,
    "n_heads": 128,
    "n_kv_heads": 8,
    "d_ff": 53248,
    "vocab_size": 128256,
    "seq_len": 8192,
    "mlp": "swiglu",
    "tied_embeddings": False,
    "bias": False,
}

_LLAMA3_SRC = (
    "Llama Team, AI @ Meta, 'The Llama 3 Herd of Models', arXiv:2407.21783, §3.3.1-3.3.2, "
    "Table 4 'Scaling configurations and MFU for each stage of Llama 3 405B pre-training'."
)
_LLAMA3_NOTES = (
    "H100 80GB HBM3 at 700 W, Grand Teton, 8 GPUs/server, RoCE 400 Gb/s per GPU. Model "
    "dims from the released Llama 3.1 405B config (paper Table 3: 126 layers, 16,384 dim, "
    "53,248 FFN, 128 heads, 8 KV heads, vocab '128,000'; 128256 used). DP is FSDP that "
    "shards optimizer states and gradients but does not reshard parameters after forward "
    "(-> zero=2). Interleaved 1F1B with 'V pipeline stages on one pipeline rank' is used "
    "but V is not stated: vpp=1 is a placeholder, NOT the real value; first and last "
    "stages hold one layer less. Micro-batch not stated (1 assumed). Sequence parallelism "
    "not stated (TP cites Korthikanti et al.; assumed on). MFU = BF16 model FLOPs (Chowdhery "
    "et al. definition) over 989 TFLOP/s; 430/989 = 43%."
)

_DGXC_SRC = (
    "NVIDIA dgxc-benchmarking (github.com/NVIDIA/dgxc-benchmarking), '{path}', "
    "'Expected Performance' table, NeMo {fw} container, DGX H100."
)
_DGXC_NOTES = (
    "H100 SXM 80GB, 8/node. Step time is the last logged train_step_timing of a 50/100-step "
    "run. Layout fields from the table header; sequence_parallel=true, no activation "
    "checkpointing, distributed (ZeRO-1-like) optimizer, TP comm overlap from the matching "
    "NeMo-Framework-Launcher conf/training yaml (may differ in detail from the container's "
    "copy). MFU is the README's own number (nemo-dgxc FLOPs / 989 TFLOP/s)."
)

_NEMOTRON4_340B = {
    "n_layers": 96,
    "d_model": 18432,
    "n_heads": 96,
    "n_kv_heads": 8,
    "d_ff": 73728,
    "vocab_size": 256000,
    "seq_len": 4096,
    "mlp": "gelu",
    "tied_embeddings": False,
    "bias": False,
}

_NEMOTRON4_15B = {
    "n_layers": 32,
    "d_model": 6144,
    "n_heads": 48,
    "n_kv_heads": 8,
    "d_ff": 24576,
    "vocab_size": 256000,
    "seq_len": 4096,
    "mlp": "gelu",
    "tied_embeddings": False,
    "bias": False,
}

_LLAMA31_70B = {
    "n_layers": 80,
    "d_model": 8192,
    "n_heads": 64,
    "n_kv_heads": 8,
    "d_ff": 28672,
    "vocab_size": 128256,
    "seq_len": 8192,
    "mlp": "swiglu",
    "tied_embeddings": False,
    "bias": False,
}

_LLAMA31_8B = {
    "n_layers": 32,
    "d_model": 4096,
    "n_heads": 32,
    "n_kv_heads": 8,
    "d_ff": 14336,
    "vocab_size": 128256,
    "seq_len": 8192,
    "mlp": "swiglu",
    "tied_embeddings": False,
    "bias": False,
}


PUBLISHED_RUNS: list[dict] = [
    # ----------------------------------------------------------------------------------
    # Korthikanti et al. 2022 (arXiv:2205.05198), Table 5, iteration times.
    # calculon validation.py: kProfile = {'22B': {'full': 1.42, 'seqsel': 1.10},
    #   '175B': {'full': 18.13, 'seqsel': 13.75}, '530B': {'full': 49.05, 'seqsel': 37.83},
    #   '1T': {'full': 94.42, 'seqsel': 71.49}}
    # calculon validation/22B_*.json: "num_procs": 8, "tensor_par": 8, "pipeline_par": 1,
    #   "batch_size": 4, "microbatch_size": 4, "pipeline_interleaving": 1
    # examples/22B.json: "hidden": 6144, "seq_size": 2048, "attn_heads": 64, "num_blocks": 48
    # ----------------------------------------------------------------------------------
    {
        "id": "korthikanti-22b-full",
        "source": _KORTHIKANTI_SRC,
        "model": _gpt(48, 6144, 64),
        "gpu": "a100-80gb",
        "n_gpus": 8,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 1,
        "dp": 1,
        "cp": 1,
        "vpp": 1,
        "sp": False,
        "recompute": "full",
        "zero": 0,
        "global_batch": 4,
        "micro_batch": 4,
        "measured": {"iteration_seconds": 1.42},
        "notes": _KORTHIKANTI_NOTES,
    },
    # README: "| 22B | 41.5% | 43.7% |" (MFU, HFU of the present-work configuration)
    {
        "id": "korthikanti-22b-selective-sp",
        "source": _KORTHIKANTI_SRC,
        "model": _gpt(48, 6144, 64),
        "gpu": "a100-80gb",
        "n_gpus": 8,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 1,
        "dp": 1,
        "cp": 1,
        "vpp": 1,
        "sp": True,
        "recompute": "selective",
        "zero": 0,
        "global_batch": 4,
        "micro_batch": 4,
        "measured": {
            "iteration_seconds": 1.10,
            "mfu": 0.415,
            "hfu": 0.437,
            "flops_formula": "megatron-72Bslh2 (MFU); HFU adds selective recompute",
        },
        "notes": _KORTHIKANTI_NOTES,
    },
    # calculon validation/175B_*.json: "num_procs": 64, "tensor_par": 8, "pipeline_par": 8,
    #   "batch_size": 64, "microbatch_size": 1, "pipeline_interleaving": 3
    # examples/175B.json: "hidden": 12288, "attn_heads": 96, "num_blocks": 96
    {
        "id": "korthikanti-175b-full",
        "source": _KORTHIKANTI_SRC,
        "model": _gpt(96, 12288, 96),
        "gpu": "a100-80gb",
        "n_gpus": 64,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 8,
        "dp": 1,
        "cp": 1,
        "vpp": 3,
        "sp": False,
        "recompute": "full",
        "zero": 0,
        "global_batch": 64,
        "micro_batch": 1,
        "measured": {"iteration_seconds": 18.13},
        "notes": _KORTHIKANTI_NOTES,
    },
    # README: "| 175B | 51.4% | 52.8% |"
    {
        "id": "korthikanti-175b-selective-sp",
        "source": _KORTHIKANTI_SRC,
        "model": _gpt(96, 12288, 96),
        "gpu": "a100-80gb",
        "n_gpus": 64,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 8,
        "dp": 1,
        "cp": 1,
        "vpp": 3,
        "sp": True,
        "recompute": "selective",
        "zero": 0,
        "global_batch": 64,
        "micro_batch": 1,
        "measured": {
            "iteration_seconds": 13.75,
            "mfu": 0.514,
            "hfu": 0.528,
            "flops_formula": "megatron-72Bslh2 (MFU); HFU adds selective recompute",
        },
        "notes": _KORTHIKANTI_NOTES,
    },
    # calculon validation/530B_*.json: "num_procs": 280, "tensor_par": 8, "pipeline_par": 35,
    #   "batch_size": 280, "microbatch_size": 1, "pipeline_interleaving": 3
    # examples/530B.json: "hidden": 20480, "attn_heads": 128, "num_blocks": 105
    {
        "id": "korthikanti-530b-full",
        "source": _KORTHIKANTI_SRC,
        "model": _gpt(105, 20480, 128),
        "gpu": "a100-80gb",
        "n_gpus": 280,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 35,
        "dp": 1,
        "cp": 1,
        "vpp": 3,
        "sp": False,
        "recompute": "full",
        "zero": 0,
        "global_batch": 280,
        "micro_batch": 1,
        "measured": {"iteration_seconds": 49.05},
        "notes": _KORTHIKANTI_NOTES,
    },
    # README: "| 530B | 56.0% | 57.0% |"
    {
        "id": "korthikanti-530b-selective-sp",
        "source": _KORTHIKANTI_SRC,
        "model": _gpt(105, 20480, 128),
        "gpu": "a100-80gb",
        "n_gpus": 280,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 35,
        "dp": 1,
        "cp": 1,
        "vpp": 3,
        "sp": True,
        "recompute": "selective",
        "zero": 0,
        "global_batch": 280,
        "micro_batch": 1,
        "measured": {
            "iteration_seconds": 37.83,
            "mfu": 0.560,
            "hfu": 0.570,
            "flops_formula": "megatron-72Bslh2 (MFU); HFU adds selective recompute",
        },
        "notes": _KORTHIKANTI_NOTES,
    },
    # calculon validation/1T_*.json: "num_procs": 512, "tensor_par": 8, "pipeline_par": 64,
    #   "batch_size": 512, "microbatch_size": 1, "pipeline_interleaving": 1
    # examples/1T.json: "hidden": 25600, "attn_heads": 160, "num_blocks": 128
    {
        "id": "korthikanti-1t-full",
        "source": _KORTHIKANTI_SRC,
        "model": _gpt(128, 25600, 160),
        "gpu": "a100-80gb",
        "n_gpus": 512,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 64,
        "dp": 1,
        "cp": 1,
        "vpp": 1,
        "sp": False,
        "recompute": "full",
        "zero": 0,
        "global_batch": 512,
        "micro_batch": 1,
        "measured": {"iteration_seconds": 94.42},
        "notes": _KORTHIKANTI_NOTES,
    },
    # README: "| 1T | 56.3% | 57.0% |"; "for the one trillion parameter model, we reach a MFU
    # and HFU of 56.3% and 57.0%, respectively."
    {
        "id": "korthikanti-1t-selective-sp",
        "source": _KORTHIKANTI_SRC,
        "model": _gpt(128, 25600, 160),
        "gpu": "a100-80gb",
        "n_gpus": 512,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 64,
        "dp": 1,
        "cp": 1,
        "vpp": 1,
        "sp": True,
        "recompute": "selective",
        "zero": 0,
        "global_batch": 512,
        "micro_batch": 1,
        "measured": {
            "iteration_seconds": 71.49,
            "mfu": 0.563,
            "hfu": 0.570,
            "flops_formula": "megatron-72Bslh2 (MFU); HFU adds selective recompute",
        },
        "notes": _KORTHIKANTI_NOTES,
    },
    # ----------------------------------------------------------------------------------
    # MT-NLG 530B (Smith et al. 2022, arXiv:2201.11990), §2.4.
    # "As reported in Section 2.4 of the paper, with global batch size 1920 on 280, 350, and
    #  420 DGX A100 servers ..., the latency per iteration observed is 60.1, 50.2, and 44.4
    #  seconds respectively. These correspond to 126, 121, and 113 TFLOP/s per GPU"
    #  (cli99/llm-analysis examples/megatron-turing-nlg/README.md);
    # MS/NVIDIA blog: "Each model replica spans 280 NVIDIA A100 GPUs, with 8-way
    #  tensor-slicing within a node, and 35-way pipeline parallelism across nodes."
    # ----------------------------------------------------------------------------------
    {
        "id": "mtnlg-530b-2240gpu",
        "source": (
            "Smith et al. 2022, 'Using DeepSpeed and Megatron to Train Megatron-Turing NLG "
            "530B', arXiv:2201.11990, §2.4 (as quoted by cli99/llm-analysis "
            "examples/megatron-turing-nlg/README.md); layout from the MS/NVIDIA MT-NLG blog."
        ),
        "model": _gpt(105, 20480, 128, vocab_size=50272),
        "gpu": "a100-80gb",
        "n_gpus": 2240,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 35,
        "dp": 8,
        "cp": 1,
        "vpp": 1,
        "sp": False,
        "recompute": "full",
        "zero": 1,
        "global_batch": 1920,
        "micro_batch": 1,
        "measured": {
            "iteration_seconds": 60.1,
            "tflops_per_gpu": 126,
            "flops_formula": "megatron-96Bslh2",
        },
        "notes": (
            "Selene DGX A100 80GB (llm-analysis says 40GB, but the MS/NVIDIA blog and "
            "Selene are 80GB). Vocab 50272 = GPT-2 BPE 50257 padded (llm-analysis "
            "mt-nlg-530b.json). Check: 96Bslh2 with B=1920, V=50272 over 60.1 s on 2240 "
            "GPUs = 125.7 TFLOP/s, matching 126, so full recompute is in the count. "
            "Micro-batch not found in a stored source: 1 assumed. ZeRO stage 1 (DeepSpeed "
            "data parallelism) assumed. DeepSpeed 1F1B pipeline, non-interleaved."
        ),
    },
    # "... 420 DGX A100 servers ... 44.4 seconds ... 113 TFLOP/s per GPU"
    {
        "id": "mtnlg-530b-3360gpu",
        "source": (
            "Smith et al. 2022, arXiv:2201.11990, §2.4 (as quoted by cli99/llm-analysis "
            "examples/megatron-turing-nlg/README.md)."
        ),
        "model": _gpt(105, 20480, 128, vocab_size=50272),
        "gpu": "a100-80gb",
        "n_gpus": 3360,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 35,
        "dp": 12,
        "cp": 1,
        "vpp": 1,
        "sp": False,
        "recompute": "full",
        "zero": 1,
        "global_batch": 1920,
        "micro_batch": 1,
        "measured": {
            "iteration_seconds": 44.4,
            "tflops_per_gpu": 113,
            "flops_formula": "megatron-96Bslh2",
        },
        "notes": (
            "Same assumptions as mtnlg-530b-2240gpu. Check: 96Bslh2 / (44.4 s * 3360) = "
            "113.5 TFLOP/s. The 350-server point (2800 GPUs, dp=10, 50.2 s, 121 TFLOP/s) "
            "is also published and can be added the same way."
        ),
    },
    # ----------------------------------------------------------------------------------
    # Narayanan et al. 2021 (arXiv:2104.04473), Table 1 (weak scaling, interleaved schedule).
    # "| 145.6 | 96 | 12288 | 80 | 8 | 8 | 1536 | 2304 | 148 | 47% | 227.1 |"
    # §5.1: "we use the interleaved pipeline schedule with the scatter/gather optimization
    #  enabled. All models use a vocabulary size (denoted by V) of 51,200 ... and a sequence
    #  length (s) of 2048." Eq. 3: F = 96Bslh^2(1 + s/6h + V/16lh), "assumes activation
    #  recomputation".
    # ----------------------------------------------------------------------------------
    {
        "id": "narayanan-145b-1536gpu",
        "source": _NARAYANAN_SRC + " Table 1, row 145.6B.",
        "model": _gpt(80, 12288, 96),
        "gpu": "a100-80gb",
        "n_gpus": 1536,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 8,
        "dp": 24,
        "cp": 1,
        "vpp": 2,
        "sp": False,
        "recompute": "full",
        "zero": 0,
        "global_batch": 2304,
        "micro_batch": 1,
        "measured": {"tflops_per_gpu": 148, "flops_formula": "megatron-96Bslh2"},
        "notes": (
            "Selene DGX A100 80GB, 8x HDR IB per node. Interleaved schedule stated, number "
            "of model chunks per device NOT stated: vpp=2 assumed. Micro-batch not stated "
            "in Table 1: 1 assumed (Table 2 PTD rows use 1). Implied step time = "
            "96Bslh2(...)/(148e12*1536) = 24.8 s (derived, not published)."
        ),
    },
    # "| 1008.0 | 160 | 25600 | 128 | 8 | 64 | 3072 | 3072 | 163 | 52% | 502.0 |"
    {
        "id": "narayanan-1t-3072gpu",
        "source": _NARAYANAN_SRC + " Table 1, row 1008.0B.",
        "model": _gpt(128, 25600, 160),
        "gpu": "a100-80gb",
        "n_gpus": 3072,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 64,
        "dp": 6,
        "cp": 1,
        "vpp": 2,
        "sp": False,
        "recompute": "full",
        "zero": 0,
        "global_batch": 3072,
        "micro_batch": 1,
        "measured": {"tflops_per_gpu": 163, "flops_formula": "megatron-96Bslh2"},
        "notes": (
            "As narayanan-145b-1536gpu: vpp=2 and micro_batch=1 assumed (128 layers / 64 "
            "stages = 2 layers per stage, so vpp=2 means one layer per chunk)."
        ),
    },
    # Table 2 (PTD Parallelism): "| 174.6 | 96 | 1536 | 384 | 1 | 153 | 84 |"
    #   (params | model-parallel size | batch | GPUs | microbatch | TFLOP/s | days for 300B)
    {
        "id": "narayanan-175b-ptd-384gpu",
        "source": _NARAYANAN_SRC + " Table 2, 'PTD Parallelism', 174.6B at 384 GPUs.",
        "model": _gpt(96, 12288, 96),
        "gpu": "a100-80gb",
        "n_gpus": 384,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 12,
        "dp": 4,
        "cp": 1,
        "vpp": 1,
        "sp": False,
        "recompute": "full",
        "zero": 0,
        "global_batch": 1536,
        "micro_batch": 1,
        "measured": {"tflops_per_gpu": 153, "flops_formula": "megatron-96Bslh2"},
        "notes": (
            "Table 2 gives only 'model-parallel size 96'; split as TP=8 x PP=12 (TP = GPUs "
            "per node, the paper's rule; same split in cli99/llm-analysis "
            "examples/megatron-lm run_train.sh). Micro-batch 1 is stated. Whether the "
            "interleaved schedule was on for Table 2 is not stated: vpp=1 assumed. Other "
            "published points of the same row: 768 GPUs -> 149, 1536 GPUs -> 141 TFLOP/s."
        ),
    },
    # ----------------------------------------------------------------------------------
    # BLOOM 176B (BigScience tr11), bigscience-workshop/bigscience
    # train/tr11-176B-ml/README.md. "TP=4 PP=12 DP=8 MBS=2"; "GLOBAL_BATCH_SIZE=2048";
    # log line: "iteration 85376/ 115311 | ... | elapsed time per iteration (s): 104.70 |
    #  ... | global batch size: 2048 | ... | samples per second: 19.561 | TFLOPs: 149.77"
    # ----------------------------------------------------------------------------------
    {
        "id": "bloom-176b-384gpu",
        "source": (
            "BigScience, BLOOM-176B training (tr11-176B-ml), github.com/bigscience-workshop/"
            "bigscience train/tr11-176B-ml/README.md ('Replica setup', 'Important "
            "checkpoints' log line at iteration 85376); Scao et al. 2022, arXiv:2211.05100."
        ),
        "model": {
            "n_layers": 70,
            "d_model": 14336,
            "n_heads": 112,
            "n_kv_heads": 112,
            "d_ff": 57344,
            "vocab_size": 250880,
            "seq_len": 2048,
            "mlp": "gelu",
            "tied_embeddings": True,
            "bias": True,
        },
        "gpu": "a100-80gb",
        "n_gpus": 384,
        "gpus_per_node": 8,
        "tp": 4,
        "pp": 12,
        "dp": 8,
        "cp": 1,
        "vpp": 1,
        "sp": False,
        "recompute": "full",
        "zero": 1,
        "global_batch": 2048,
        "micro_batch": 2,
        "measured": {
            "iteration_seconds": 104.70,
            "tflops_per_gpu": 149.77,
            "flops_formula": "megatron-96Bslh2",
        },
        "notes": (
            "Jean Zay, 48 nodes x 8 A100 80GB, NVLink intra-node, 4x Omni-Path links per "
            "node (not InfiniBand). Megatron-DeepSpeed, bf16, DeepSpeed BF16_Optimizer "
            "(its own ZeRO stage 1), --deepspeed-activation-checkpointing (full). "
            "Tokenizer vocab 250,680, padded embedding 250,880 ('250880*14336'). ALiBi, "
            "embedding LayerNorm. Embedding counted as a PP partition unit "
            "('type:transformer|embedding'): stages 0 and 11 hold 5 blocks + embedding. "
            "Check: 96Bslh2 with V=250880 over 104.70 s on 384 GPUs = 149.8 TFLOP/s."
        ),
    },
    # ----------------------------------------------------------------------------------
    # Nemotron-4 15B (Parmar et al. 2024, arXiv:2402.16819), §2, Table 2:
    # "We used a combination of 8-way tensor parallelism ... and data parallelism to train
    #  the model; we also use a distributed optimizer to shard the optimizer state over the
    #  data-parallel replicas."
    # "Data-parallel size | GPUs | Iteration time (secs) | MFU (%) | Batch size | Tokens (B)"
    # "96 | 768 | 0.57 | 34.3 | 384 | 200"; "288 | 2,304 | 0.64 | 30.5 | 1,152 | 7,600"
    # ----------------------------------------------------------------------------------
    {
        "id": "nemotron4-15b-768gpu",
        "source": (
            "Parmar et al. 2024, 'Nemotron-4 15B Technical Report', arXiv:2402.16819, §2 "
            "'Pre-training' and Table 2 (text read from a stored conversion of the paper)."
        ),
        "model": dict(_NEMOTRON4_15B),
        "gpu": "h100-sxm",
        "n_gpus": 768,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 1,
        "dp": 96,
        "cp": 1,
        "vpp": 1,
        "sp": True,
        "recompute": "none",
        "zero": 1,
        "global_batch": 384,
        "micro_batch": 1,
        "measured": {"iteration_seconds": 0.57, "mfu": 0.343},
        "notes": (
            "384 DGX H100 nodes (H100 80GB SXM5, 8x 400 Gb/s IB per node). Paper Table 1: "
            "32 layers, 6144 hidden, 48 heads, 8 KV heads, seq 4096, vocab 256,000; "
            "squared-ReLU non-gated MLP (mlp='gelu' = same matmul shapes), no bias, untied "
            "embeddings, RoPE. d_ff=24576 from NeMo-Framework-Launcher nemotron_15b.yaml "
            "(paper does not state it). Not stated, assumed: micro_batch=1 (4 sequences per "
            "DP rank per step), sequence parallelism on (Megatron default with TP, and on "
            "in the NeMo config), no recompute (NeMo config has none). MFU per Chowdhery "
            "et al. / Korthikanti et al. over 989 TFLOP/s."
        ),
    },
    # Table 2: "288 | 2,304 | 0.64 | 30.5 | 1,152 | 7,600 | 11.9"
    {
        "id": "nemotron4-15b-2304gpu",
        "source": "Parmar et al. 2024, arXiv:2402.16819, Table 2, third row.",
        "model": dict(_NEMOTRON4_15B),
        "gpu": "h100-sxm",
        "n_gpus": 2304,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 1,
        "dp": 288,
        "cp": 1,
        "vpp": 1,
        "sp": True,
        "recompute": "none",
        "zero": 1,
        "global_batch": 1152,
        "micro_batch": 1,
        "measured": {"iteration_seconds": 0.64, "mfu": 0.305},
        "notes": (
            "Same assumptions as nemotron4-15b-768gpu. The middle row (DP 192, 1,536 GPUs, "
            "0.58 s, 33.3%, batch 768) is also published."
        ),
    },
    # ----------------------------------------------------------------------------------
    # Nemotron-4 340B (NVIDIA 2024, arXiv:2406.11704), Table 2, last stage:
    # "the largest stage used all 6144 GPUs with a batch size of 2304 and an iteration time
    #  (time per batch) of 8.0 seconds" (aiportalx.com/nvidia/nemotron-4-340b, quoting the
    #  technical report's Table 2; MFU "41-42%").
    # ----------------------------------------------------------------------------------
    {
        "id": "nemotron4-340b-6144gpu",
        "source": (
            "NVIDIA 2024, 'Nemotron-4 340B Technical Report', arXiv:2406.11704, §3 / Table 2 "
            "(batch-size ramp), last stage; as quoted by aiportalx.com/nvidia/nemotron-4-340b."
        ),
        "model": dict(_NEMOTRON4_340B),
        "gpu": "h100-sxm",
        "n_gpus": 6144,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 12,
        "dp": 64,
        "cp": 1,
        "vpp": 8,
        "sp": True,
        "recompute": "none",
        "zero": 1,
        "global_batch": 2304,
        "micro_batch": 1,
        "measured": {"iteration_seconds": 8.0},
        "notes": (
            "WEAKEST-SOURCED ENTRY: only GPUs=6144, batch=2304 and 8.0 s are verified (via a "
            "third-party quote of the report). TP=8 / PP=12 with interleaving is the "
            "report's stated layout as recalled and as used by third-party calibrations; "
            "vpp=8 comes from a third-party summary of NVIDIA's Megatron-Core blog (96 "
            "layers / 12 / 8 = 1 layer per chunk); not verified here. Model from "
            "NeMo-Framework-Launcher nemotron_340b.yaml: 96 layers, 18432 hidden, "
            "ffn 4h, 96 heads, 8 query groups, squared-ReLU, no bias, untied, vocab "
            "256000, seq 4096. Micro-batch 1, SP on, no recompute, distributed optimizer "
            "taken from that yaml (a benchmark config, not necessarily the training run). "
            "Published MFU for this stage is ~41%."
        ),
    },
    # ----------------------------------------------------------------------------------
    # Llama 3 405B (arXiv:2407.21783) Table 4:
    # "| GPUs | TP | CP | PP | DP | Seq. Len. | Batch size/DP | Tokens/Batch | TFLOPs/GPU |
    #    BF16 MFU |"
    # "| 8,192 | 8 | 1 | 16 | 64 | 8,192 | 32 | 16M | 430 | 43% |"
    # §3.3.2: "With these optimizations, Llama 3 could be pre-trained on sequences of 8K
    #  tokens without activation checkpointing."
    # ----------------------------------------------------------------------------------
    {
        "id": "llama3-405b-8k-8192gpu",
        "source": _LLAMA3_SRC + " Row 1.",
        "model": dict(_LLAMA3_405B),
        "gpu": "h100-sxm",
        "n_gpus": 8192,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 16,
        "dp": 64,
        "cp": 1,
        "vpp": 1,
        "sp": True,
        "recompute": "none",
        "zero": 2,
        "global_batch": 2048,
        "micro_batch": 1,
        "measured": {
            "tflops_per_gpu": 430,
            "mfu": 0.43,
            "flops_formula": "bf16 model FLOPs, MFU per Chowdhery et al. 2022",
        },
        "notes": _LLAMA3_NOTES + " global_batch = 64 DP x 32 = 2048 seqs = 16.8M tokens.",
    },
    # "| 16,384 | 8 | 1 | 16 | 128 | 8,192 | 16 | 16M | 400 | 41% |"
    {
        "id": "llama3-405b-8k-16384gpu",
        "source": _LLAMA3_SRC + " Row 2.",
        "model": dict(_LLAMA3_405B),
        "gpu": "h100-sxm",
        "n_gpus": 16384,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 16,
        "dp": 128,
        "cp": 1,
        "vpp": 1,
        "sp": True,
        "recompute": "none",
        "zero": 2,
        "global_batch": 2048,
        "micro_batch": 1,
        "measured": {
            "tflops_per_gpu": 400,
            "mfu": 0.41,
            "flops_formula": "bf16 model FLOPs, MFU per Chowdhery et al. 2022",
        },
        "notes": _LLAMA3_NOTES
        + (
            " Paper: the drop to 41% 'is due to the lower batch size per DP group needed "
            "to keep the global tokens per batch constant'."
        ),
    },
    # "| 16,384 | 8 | 16 | 16 | 8 | 131,072 | 16 | 16M | 380 | 38% |"
    {
        "id": "llama3-405b-128k-cp16",
        "source": _LLAMA3_SRC + " Row 3 (long-context stage).",
        "model": dict(_LLAMA3_405B, seq_len=131072),
        "gpu": "h100-sxm",
        "n_gpus": 16384,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 16,
        "dp": 8,
        "cp": 16,
        "vpp": 1,
        "sp": True,
        "recompute": "none",
        "zero": 2,
        "global_batch": 128,
        "micro_batch": 1,
        "measured": {
            "tflops_per_gpu": 380,
            "mfu": 0.38,
            "flops_formula": "bf16 model FLOPs, MFU per Chowdhery et al. 2022",
        },
        "notes": _LLAMA3_NOTES
        + (
            " One stored transcription of this row reads DP=4; 16384/(8*16*16) = 8, and two "
            "other transcriptions read 8. CP is all-gather-based (K/V all-gathered, each "
            "rank gets chunks i and 2*CP-1-i). 'No activation checkpointing' is stated only "
            "for 8K; recompute='none' here is an assumption (per-GPU tokens equal the 8K "
            "rows'). With 131K tokens the FLOP convention matters: Chowdhery's 6N + "
            "12*l*h*s attention term vs causal counting differ a lot."
        ),
    },
    # ----------------------------------------------------------------------------------
    # NVIDIA dgxc-benchmarking, nemo_megatron/README_175b.md:
    # "| NeMo Megatron BF16 (TP=4,PP=8, MBS=1, VP=12, SEQ=2048) | 128x H100 GPUs (GBS=256)"
    # "| Training step time (seconds per step) | 8.309 |"; "| Model flops utilization |
    #  53.54% |"; "The model flops for GPT 3 175b for GBS=1 is 2.20E+15."
    # gpt3_175b_hydra.yaml: "sequence_parallel: true", "activations_checkpoint_granularity:
    #  null", "optim: name: distributed_fused_adam", "num_layers: 96", "hidden_size: 12288",
    #  "ffn_hidden_size: 49152", "num_attention_heads: 96", "GPT2BPETokenizer"
    # ----------------------------------------------------------------------------------
    {
        "id": "dgxc-gpt3-175b-bf16-128gpu",
        "source": _DGXC_SRC.format(path="nemo_megatron/README_175b.md", fw="(DGXC 24.x)")
        + " Config: nemo_megatron/gpt3_175b_hydra.yaml.",
        "model": _gpt(96, 12288, 96, vocab_size=50688),
        "gpu": "h100-sxm",
        "n_gpus": 128,
        "gpus_per_node": 8,
        "tp": 4,
        "pp": 8,
        "dp": 4,
        "cp": 1,
        "vpp": 12,
        "sp": True,
        "recompute": "none",
        "zero": 1,
        "global_batch": 256,
        "micro_batch": 1,
        "measured": {
            "iteration_seconds": 8.309,
            "mfu": 0.5354,
            "flops_formula": "nemo-dgxc (2.20e15 FLOPs/sequence, V=51200)",
        },
        "notes": _DGXC_NOTES
        + (
            " Layout and SP/recompute/optimizer from this recipe's own gpt3_175b_hydra.yaml. "
            "Vocab: GPT-2 BPE 50257 padded to a multiple of 128*TP=512 -> 50688 (derived "
            "from make_vocab_size_divisible_by: 128; the README's FLOP count uses 51200). "
            "Tied embeddings and biases are NeMo GPT defaults (not in the yaml). Other "
            "scales in the same table: 256 GPUs 8.408 s, 512: 8.42 s, 1024: 8.453 s, "
            "2048: 8.49 s (GBS = 2 x GPUs)."
        ),
    },
    # llama3.1/README_70b.md: "| Llama 3.1 70b 24.09 BF16 (TP=4, PP=4, CP=2, VP=5, MBS=1,
    #  GA=64) | Throughput on 64x H100 GPUs (GBS=128) |"; "| Training step time (seconds per
    #  step) | 14.72 |"; "| Model flops utilization | 54.10% |"
    {
        "id": "dgxc-llama31-70b-bf16-64gpu",
        "source": _DGXC_SRC.format(path="llama3.1/README_70b.md", fw="24.09")
        + " Config: NeMo-Framework-Launcher conf/training/llama/llama3_1_70b.yaml.",
        "model": dict(_LLAMA31_70B),
        "gpu": "h100-sxm",
        "n_gpus": 64,
        "gpus_per_node": 8,
        "tp": 4,
        "pp": 4,
        "dp": 2,
        "cp": 2,
        "vpp": 5,
        "sp": True,
        "recompute": "none",
        "zero": 1,
        "global_batch": 128,
        "micro_batch": 1,
        "measured": {
            "iteration_seconds": 14.72,
            "mfu": 0.5410,
            "flops_formula": "nemo-dgxc (3.94e15 FLOPs/sequence)",
        },
        "notes": _DGXC_NOTES
        + (
            " DP = 64/(4*4*2) = 2, GA = 128/(2*1) = 64 as stated. Other scales: 128 GPUs "
            "14.73 s, 256: 14.8, 512: 14.89, 1024: 14.92, 2048: 14.98 (GBS = 2 x GPUs)."
        ),
    },
    # llama3.1/README_405b.md: "| Llama 3.1 405b 24.09 BF16 (TP=8, PP=9, CP=2, VP=7, MBS=1,
    #  GA=63) |"; 576x H100 column: "| GBS | 252 |", "| Training step time (seconds per
    #  step) | 17.20 |", "| Model flops utilization | 55.78% |";
    # "Note that Llama3.1 405B uses the GPT2BPETokenizer as a proxy."
    {
        "id": "dgxc-llama31-405b-bf16-576gpu",
        "source": _DGXC_SRC.format(path="llama3.1/README_405b.md", fw="24.09")
        + " Config: NeMo-Framework-Launcher conf/training/llama/llama3_1_405b.yaml.",
        "model": dict(_LLAMA3_405B, n_kv_heads=16, vocab_size=51200),
        "gpu": "h100-sxm",
        "n_gpus": 576,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 9,
        "dp": 4,
        "cp": 2,
        "vpp": 7,
        "sp": True,
        "recompute": "none",
        "zero": 1,
        "global_batch": 252,
        "micro_batch": 1,
        "measured": {
            "iteration_seconds": 17.20,
            "mfu": 0.5578,
            "flops_formula": "nemo-dgxc (2.17e16 FLOPs/sequence, V=128256)",
        },
        "notes": _DGXC_NOTES
        + (
            " The NeMo 405B config uses num_query_groups: 16 (the released model has 8) and "
            "the README's FLOP formula uses 16/128, so n_kv_heads=16 here. Synthetic data "
            "with the GPT-2 BPE tokenizer as proxy: executed vocab = 50257 padded to a "
            "multiple of 128*TP=1024 -> 51200 (derived), while the README's MFU counts "
            "V=128256. DP = 576/(8*9*2) = 4, GA = 252/4 = 63. 1152 GPUs (GBS 504): 17.52 s; "
            "2304 GPUs (GBS 1008): 17.62 s."
        ),
    },
    # nemotron/README_340b.md: "| Nemotron4 340b 24.11 BF16 (TP=8, PP=8, MBS=1, GA=16, VP=12)
    #  | Throughput on 128x H100 GPUs (GBS=32) |"; "| Training step time (seconds per step)
    #  |  4.61 |"; "| Model flops utilization | 55.38% |"
    {
        "id": "dgxc-nemotron4-340b-bf16-128gpu",
        "source": _DGXC_SRC.format(path="nemotron/README_340b.md", fw="24.09/24.11")
        + " Config: NeMo-Framework-Launcher conf/training/nemotron/nemotron_340b.yaml.",
        "model": dict(_NEMOTRON4_340B),
        "gpu": "h100-sxm",
        "n_gpus": 128,
        "gpus_per_node": 8,
        "tp": 8,
        "pp": 8,
        "dp": 2,
        "cp": 1,
        "vpp": 12,
        "sp": True,
        "recompute": "none",
        "zero": 1,
        "global_batch": 32,
        "micro_batch": 1,
        "measured": {
            "iteration_seconds": 4.61,
            "mfu": 0.5538,
            "flops_formula": "nemo-dgxc (1.01e16 FLOPs/sequence, MHA, 4h MLP)",
        },
        "notes": _DGXC_NOTES
        + (
            " Table header says 24.11 while the setup text says nemo:24.09. Squared-ReLU "
            "non-gated MLP (mlp='gelu'), 8 query groups, rotary_percentage 0.5, no bias, "
            "untied, vocab 256000 (synthetic data). The README's FLOP formula ignores GQA. "
            "The README's worked example quotes 4.77 s for this point; the table says 4.61 "
            "(table value used). Other scales: 256 GPUs 4.67 s, 512: 4.7, 1024: 4.73, "
            "2048: 4.84 (GBS = GPUs / 4)."
        ),
    },
    # ----------------------------------------------------------------------------------
    # torchtitan docs/performance.md (commit eaea6f6):
    # "**Table 3** 1D Parallelism (FSDP). Llama 3.1 8B model. 128 GPUs. Local batch size 2,
    #  global batch size 256. Selective activation checkpointing."  "| FSDP | 5,605 | 67.0 |"
    # "Each H100 GPU is equipped with 96GB HBM2e ... We used the default 500W power limit"
    # ----------------------------------------------------------------------------------
    {
        "id": "torchtitan-llama31-8b-fsdp-128gpu",
        "source": (
            "pytorch/torchtitan docs/performance.md, Table 3 (Liang et al. 2024, "
            "'TorchTitan', arXiv:2410.06511), row 'FSDP' (eager, bf16, no Float8)."
        ),
        "model": dict(_LLAMA31_8B),
        "gpu": "other:h100-sxm-96gb-hbm2e-500w",
        "n_gpus": 128,
        "gpus_per_node": 8,
        "tp": 1,
        "pp": 1,
        "dp": 128,
        "cp": 1,
        "vpp": 1,
        "sp": False,
        "recompute": "selective",
        "zero": 3,
        "global_batch": 256,
        "micro_batch": 2,
        "measured": {"tokens_per_second_per_gpu": 5605},
        "notes": (
            "Grand Teton: H100 with 96GB HBM2e (2.4 TB/s) at 500 W, not the 80GB/700 W SXM "
            "part; 400 Gb/s RDMA per GPU. FSDP2 full shard (zero=3), no gradient "
            "accumulation (micro = local batch 2). TPS read at iteration 90. Sequence "
            "length not stated in the doc: 8192 from the llama3_8b.toml default. torchtitan "
            "'selective' AC is the per-op policy (selective_ac_option='op'), not Megatron's "
            "attention-only scheme. Derived step time = 256*8192/(5605*128) = 2.92 s."
        ),
    },
    # ----------------------------------------------------------------------------------
    # mosaicml/llm-foundry scripts/train/benchmarking/README.md, "## H100 80GB BF16":
    # "|  7b | 2048 | 8 | h100_80gb | 46.44 | 46.44 |  4.595096E+14 | 6 | 1 | 48 | 41 | 85144 |
    #   10643 | 98304 | amp_bf16 | DEFAULT | FULL_SHARD | False | False | 6658859008 |"
    # ----------------------------------------------------------------------------------
    {
        "id": "mpt-7b-h100-fsdp-8gpu",
        "source": (
            "MosaicML llm-foundry, scripts/train/benchmarking/README.md, table 'H100 80GB "
            "BF16', row 7b / SeqLen 2048 / 8 GPUs; model from scripts/train/yamls/pretrain/"
            "mpt-7b.yaml."
        ),
        "model": {
            "n_layers": 32,
            "d_model": 4096,
            "n_heads": 32,
            "n_kv_heads": 32,
            "d_ff": 16384,
            "vocab_size": 50368,
            "seq_len": 2048,
            "mlp": "gelu",
            "tied_embeddings": True,
            "bias": False,
        },
        "gpu": "h100-sxm",
        "n_gpus": 8,
        "gpus_per_node": 8,
        "tp": 1,
        "pp": 1,
        "dp": 8,
        "cp": 1,
        "vpp": 1,
        "sp": False,
        "recompute": "none",
        "zero": 3,
        "global_batch": 48,
        "micro_batch": 6,
        "measured": {
            "tokens_per_second_per_gpu": 10643,
            "mfu": 0.4644,
            "flops_formula": "llm-foundry: 6*N + 12*l*d*s per token (non-causal)",
        },
        "notes": (
            "Columns: MFU 46.44, HFU 46.44, MicroBatchSize 6, GradAccum 1, GlobalBatchSize "
            "48, Throughput 85144 T/s total, 10643 T/s/GPU, FSDP FULL_SHARD, activation "
            "checkpointing False, NumParams 6,658,859,008. MPT defaults: no biases, tied "
            "embeddings, learned position embeddings (counted in NumParams), expansion "
            "ratio 4; triton/flash attention. 'h100_80gb' assumed SXM. Derived step time = "
            "48*2048/85144 = 1.155 s."
        ),
    },
]
