"""What a run measures beside what the core predicts: metrics, collectives, memory, rooflines."""
