"""`python -m trainbudget train ARGS` as torchrun runs it, then -- training returned, the
interpreter not yet shutting down -- a JSON report in the run folder (`--out`), one file per
rank (`rank-exit-<RANK>.json`): this rank, its exit code and the names of the process's threads
(Linux: /proc/self/task). For test_distributed.py's check that no thread of the process group
outlives train() (train.launch.distributed.shutdown). A file, not stdout: the ranks share torchrun's
stdout, where one rank's line can land in the middle of another's."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from trainbudget.cli.main import main

code = main(["train", *sys.argv[1:]])
tasks = Path("/proc/self/task")
threads = sorted((task / "comm").read_text().strip() for task in tasks.iterdir())
rank = int(os.environ.get("RANK", "0"))
out = Path(sys.argv[sys.argv.index("--out") + 1])
report = {"rank": rank, "code": code, "threads": threads}
(out / f"rank-exit-{rank}.json").write_text(json.dumps(report))
sys.exit(code)
