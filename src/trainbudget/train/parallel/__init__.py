"""Parallel engines of the trainer: data, tensor, pipeline, expert and context parallelism."""
