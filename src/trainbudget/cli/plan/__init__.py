"""The planning commands: estimate, plan, report and serve, and the views they print."""
