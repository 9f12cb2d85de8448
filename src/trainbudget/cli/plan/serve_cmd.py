"""`trainbudget serve`: the planner page on a local port (see `trainbudget.serve`)."""

from __future__ import annotations

import argparse
import sys

from trainbudget.cli.args import positive_int

LOCAL_HOST = "127.0.0.1"
"""Loopback only unless --host says otherwise: the page runs the estimator for whoever can
reach it, which should be this machine's user alone by default."""


def add_arguments(p: argparse.ArgumentParser, _name: str) -> None:
    p.add_argument(
        "--host",
        default=LOCAL_HOST,
        help=f"address to listen on (default {LOCAL_HOST}: this machine only; 0.0.0.0 for all)",
    )
    p.add_argument("--port", default="8765", help="TCP port (default 8765; 0 = any free port)")


def _port(text: str) -> int:
    if text.strip() == "0":
        return 0
    port = positive_int("--port", text)
    if port > 65535:
        from trainbudget.core.errors import SpecError

        raise SpecError("--port", text, "must be 0-65535 (0 = any free port)")
    return port


def run(args: argparse.Namespace) -> int:
    from trainbudget.core.errors import SpecError
    from trainbudget.serve.server import make_server

    try:
        server = make_server(args.host, _port(args.port))
    except OSError as err:
        raise SpecError(
            "--port", args.port, f"cannot listen on {args.host}: {err.strerror or err}"
        ) from None
    host, port = server.server_address[:2]
    shown = f"[{host}]" if ":" in str(host) else host
    print(
        f"trainbudget serve: the planner page is at http://{shown}:{port}/ (Ctrl-C to stop)",
        flush=True,
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        sys.stderr.write("trainbudget serve: stopped (Ctrl-C)\n")
        return 130
    finally:
        server.server_close()
    return 0
