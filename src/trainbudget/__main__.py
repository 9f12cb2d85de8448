import sys

from trainbudget.cli.main import main

sys.exit(main())
