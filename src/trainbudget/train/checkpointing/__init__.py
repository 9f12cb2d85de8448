"""Saving and restoring a run: verified checkpoints, sharded or whole, resume and recovery."""
