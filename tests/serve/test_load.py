"""The planner server under load: 1,000 requests from 20 concurrent clients on loopback, no
error, and memory that stops growing once the server is warm (no leak per request)."""

from load import run_load

from trainbudget.core.units import MiB

N_REQUESTS, N_CLIENTS = 1000, 20
N_WARM_UP = 300
"""Requests before the measured ones: they fill the answer cache (128 answers), start the
threads and grow the allocator's arenas to their working size, which is not a leak."""
RSS_GROWTH_BOUND_BYTES = 4 * MiB
"""Allowed growth of the resident set over the 1,000 measured requests. Each answer is a ~6 KB
document (a one-GPU estimate with its derivation), so keeping even one per request would add
~6 MB; measured on this machine, three runs: +1.3, +1.4 and +1.5 MiB (the cache's churn and
the clients' own buffers, in this same process)."""


def test_a_thousand_requests_from_twenty_clients_no_error_no_leak(base_url, capsys):
    warm = run_load(base_url, n_requests=N_WARM_UP, n_clients=N_CLIENTS)
    assert warm.n_errors == 0, warm.first_error
    result = run_load(base_url, n_requests=N_REQUESTS, n_clients=N_CLIENTS, first=N_WARM_UP)
    with capsys.disabled():
        print("\n" + "\n".join(result.lines()))
    assert result.n_errors == 0, result.first_error
    assert result.rss_after_bytes - result.rss_before_bytes <= RSS_GROWTH_BOUND_BYTES
