"""`python -m trainbudget COMMAND [options]`: the CLI. What torchrun launches once per device is
this too: `torchrun --nproc-per-node N -m trainbudget train [options]`."""

import sys

from trainbudget.cli.main import main

sys.exit(main())
