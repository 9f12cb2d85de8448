"""The trainer: the loop and the run's state here; spec/, launch/, parallel/, observe/ and
checkpointing/ are its rooms (README's Layout). Modules that need torch import it themselves."""
