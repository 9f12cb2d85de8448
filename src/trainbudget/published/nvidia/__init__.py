"""NVIDIA's NeMo performance pages on DGX H100 and DGX B200, FP8, one module per page:
nemo_perf (the NeMo 24.07 table, and the FLOP count and layout helper the pages share),
nemo_long_context (the long-sequence page) and megatron_bridge (the Megatron-Bridge summary).
Of published, only the record; published/__init__.py registers the rows."""
