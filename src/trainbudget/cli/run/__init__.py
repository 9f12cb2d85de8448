"""A run and this machine: data prepare, train, eval, sample, plot; profile and bench."""
