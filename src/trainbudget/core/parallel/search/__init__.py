"""The planner: its search space, one plan evaluated, the grid search, --explain, what to buy."""
