"""The reference PyTorch model, built from the same ModelSpec the estimating core reads.
Importing this package imports torch; the core never does."""

from trainbudget.model.transformer import Transformer, build_model

__all__ = ["Transformer", "build_model"]
