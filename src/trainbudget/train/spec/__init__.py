"""What a run is and what it writes, pure (no torch): config, strategies, splits, run folder."""
