"""A bounded load on a planner server: N requests from C client threads, each thread on its own
keep-alive connection (as a browser tab holds one), every answer checked.

Shared by tests/serve/test_load.py (asserts) and benchmarks/bench_serve.py --load (prints)."""

from __future__ import annotations

import http.client
import json
import statistics
import threading
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from trainbudget.core.units import MiB


@dataclass(frozen=True, kw_only=True)
class LoadResult:
    n_requests: int
    n_clients: int
    n_errors: int
    p50_seconds: float
    p99_seconds: float
    wall_seconds: float
    rss_before_bytes: int
    rss_after_bytes: int
    first_error: str

    def lines(self) -> list[str]:
        return [
            f"requests     {self.n_requests:,} from {self.n_clients} concurrent clients "
            f"in {self.wall_seconds:.2f} s ({self.n_requests / self.wall_seconds:,.0f}/s)",
            f"errors       {self.n_errors}"
            + (f" (first: {self.first_error})" * (self.n_errors > 0)),
            f"latency      p50 {1e3 * self.p50_seconds:.1f} ms, "
            f"p99 {1e3 * self.p99_seconds:.1f} ms",
            f"memory (RSS) before {self.rss_before_bytes / MiB:.1f} MiB, after "
            f"{self.rss_after_bytes / MiB:.1f} MiB "
            f"({(self.rss_after_bytes - self.rss_before_bytes) / MiB:+.1f} MiB)",
        ]


def rss_bytes() -> int:
    """This process's resident set (VmRSS of /proc/self/status, reported in kB = KiB)."""
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmRSS line in /proc/self/status")


def question(i: int) -> dict:
    """The i-th question of the load: a one-GPU estimate (no layout search, ~ms each), each with
    its own sequence length, so the answers are distinct and the cache cannot serve them all."""
    return {"model": "llama-3-8b", "seq_len": str(128 + i)}


def _client(url: str, indices: range, latencies: list[float], errors: list[str]) -> None:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    try:
        for i in indices:
            body = json.dumps(question(i))
            start = time.perf_counter()
            try:
                conn.request("POST", "/api/estimate", body, {"Content-Type": "application/json"})
                response = conn.getresponse()
                raw = response.read()
            except (OSError, http.client.HTTPException) as err:
                errors.append(f"{type(err).__name__}: {err}")
                conn.close()  # a fresh connection for the next request
                continue
            latencies.append(time.perf_counter() - start)
            if response.status != 200 or json.loads(raw)["seq_len"] != 128 + i:
                errors.append(f"request {i}: status {response.status}: {raw[:200]!r}")
    finally:
        conn.close()


def run_load(url: str, *, n_requests: int, n_clients: int, first: int = 0) -> LoadResult:
    """Send questions first .. first + n_requests - 1, split evenly over n_clients threads."""
    latencies: list[float] = []  # list.append is atomic under the GIL
    errors: list[str] = []
    share = -(-n_requests // n_clients)
    threads = [
        threading.Thread(
            target=_client,
            args=(url, range(first + k * share, first + min(n_requests, (k + 1) * share)),
                  latencies, errors),
        )
        for k in range(n_clients)
    ]  # fmt: skip
    before = rss_bytes()
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.perf_counter() - start
    cuts = statistics.quantiles(latencies, n=100) if len(latencies) > 1 else [0.0] * 99
    return LoadResult(
        n_requests=n_requests,
        n_clients=n_clients,
        n_errors=len(errors),
        p50_seconds=cuts[49],
        p99_seconds=cuts[98],
        wall_seconds=wall,
        rss_before_bytes=before,
        rss_after_bytes=rss_bytes(),
        first_error=errors[0] if errors else "",
    )
