"""A process started and stopped: launch env, rendezvous, watchdogs, run-folder lock, exits."""
