"""`python -m trainbudget train ARGS` as torchrun runs it, then -- training returned, the
interpreter not yet shutting down -- one JSON line on stdout: this rank, its exit code and the
names of the process's threads (Linux: /proc/self/task). For test_distributed.py's check that
no thread of the process group outlives train() (train.distributed.shutdown)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from trainbudget.cli.main import main

code = main(["train", *sys.argv[1:]])
tasks = Path("/proc/self/task")
threads = sorted((task / "comm").read_text().strip() for task in tasks.iterdir())
report = {"rank": int(os.environ.get("RANK", "0")), "code": code, "threads": threads}
print(json.dumps(report), flush=True)
sys.exit(code)
