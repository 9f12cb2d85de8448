"""Where a ModelSpec comes from: the --model argument (`model_arg`: a preset, `dense:N`, or a
path) and a Hugging Face config.json read into the one ModelSpec (`hf_config`, with the key
names of each family in `hf_keys` and the family rules in `hf_families`)."""
