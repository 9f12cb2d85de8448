"""Training data: text in, token files out, batches back.

- `tokenizers`: the byte tokenizer (always there) and BPE via Hugging Face `tokenizers` (optional).
- `corpus`: the embedded default corpus, Python's own reference documentation.
- `sources`: which text a source names (file, folder, JSONL) and how it splits into documents.
- `prepare`: sources -> `train.bin` / `val.bin` memmaps and the `meta.json` sidecar.
- `loader`: the memmaps -> (x, y, source_ids) batches, resumable exactly.

Nothing here imports torch at module level except `loader`; `prepare` needs numpy only.
"""
