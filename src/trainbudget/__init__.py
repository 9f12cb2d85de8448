"""trainbudget: parameters, FLOPs, memory and time of transformer training, checked against
PyTorch."""

__version__ = "0.1.0"
