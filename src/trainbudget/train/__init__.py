"""Training a model from a run config: optimizers, learning-rate schedules, the training loop
and the accounting that compares what a run measured with what the estimating core predicted.
Modules here that need torch import it themselves; `schedule` does not."""
