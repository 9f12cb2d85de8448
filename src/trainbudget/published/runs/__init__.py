"""The runs added for issue 23's item 6 ("a validation set that looks like today's training"):
one module per source, each a tuple of `PublishedRun` records (published/record.py) that
published/__init__.py registers in PUBLISHED_RUNS.

- internlm.py: InternLM's 7B scaling benchmark on 8-1024 A100 80GB
- nanochat.py: Karpathy's nanochat on 8 x H100 (d32, the Time-to-GPT-2 records)
- mlengineering.py: Bekman's ML Engineering book, Llama 3.1 8B on 8 H200 / 8 B200 to 256K tokens
- llmc.py: llm.c's GPT-2 124M and 350M launch scripts on 8 x A100
- accelerate_fp8.py: Hugging Face Accelerate's FSDP2 example, bf16 and FP8 on 8 x H100
- flagperf.py: BAAI FlagPerf's Llama 3 8B / 70B Megatron-Core runs on H100
- xtuner.py: XTuner's speed benchmark, Llama 2 7B / Yi-34B / Llama 2 70B at 8K-1M tokens with
  sequence parallelism on 8-32 A100 80GB
- kempnerforge.py: the Kempner Institute's KempnerForge MFU benchmark, 8B-70B with FSDP2 and
  tensor parallelism on 1-32 H200, with peak memory
"""
