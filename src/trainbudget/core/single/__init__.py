"""One GPU's arithmetic: parameters, FLOPs, activations, peak memory and time of one step."""
