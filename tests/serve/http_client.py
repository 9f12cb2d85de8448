"""A few lines of urllib for the tests: POST or GET a planner endpoint, read status and body."""

from __future__ import annotations

import json
import urllib.error
import urllib.request


def request(url: str, body: object | None = None, *, raw: bytes | None = None):
    """(status, headers, body bytes) of a GET (body None) or a JSON POST."""
    data = raw if raw is not None else (None if body is None else json.dumps(body).encode())
    req = urllib.request.Request(url, data=data, method="GET" if data is None else "POST")
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as err:
        return err.code, err.headers, err.read()
