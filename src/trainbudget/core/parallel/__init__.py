"""Many GPUs: the cluster and a plan's layout here; its memory, step time and search below."""
