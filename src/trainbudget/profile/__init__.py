"""Measurements with PyTorch on the local device, checked against the core's analytic figures."""
