"""The command line: parsing, formatting and printing; the arithmetic lives in trainbudget.core.
Here `main` (the entry point, which reaches each command by name), the shared options and
Ctrl-C; the commands are in plan/, tools/ and run/."""
