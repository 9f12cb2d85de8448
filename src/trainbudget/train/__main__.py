"""`python -m trainbudget.train [options]`: what torchrun launches, one process per device."""

import sys

from trainbudget.cli.main import main

sys.exit(main(["train", *sys.argv[1:]]))
