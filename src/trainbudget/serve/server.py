"""The planner page's HTTP server: the standard library's ThreadingHTTPServer, one thread per
connection, HTTP/1.1 keep-alive so the page's fetches reuse one connection.

Routes: GET / and the page's two files; GET /api/choices; /api/estimate (POST a JSON object of
inputs, or GET with them as a query) returns exactly the estimate document; POST /api/commands
the command line of each ranked plan; POST /api/emit (inputs plus `rank` and `engine`) an
engine's config file. Bad input answers 400 with {"error": one line, "field": the input}; any
other failure 500 with one line; the server keeps serving either way."""

from __future__ import annotations

import json
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from importlib import resources
from urllib.parse import parse_qsl, urlsplit

from trainbudget.core.errors import SpecError
from trainbudget.serve.answer import answer_bytes
from trainbudget.serve.choices import choices
from trainbudget.serve.plan_files import commands, engine_file
from trainbudget.serve.question import MAX_INPUT_CHARS, field_of, question_from

PAGE_FILES = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/planner.js": ("planner.js", "text/javascript; charset=utf-8"),
    "/planner.css": ("planner.css", "text/css; charset=utf-8"),
}
MAX_BODY_BYTES = 2 * MAX_INPUT_CHARS
"""A request body larger than this is refused unread: the page sends a few inputs and at most
one config.json."""


def _page_file(name: str) -> bytes:
    return resources.files("trainbudget.serve").joinpath("page", name).read_bytes()


class PlannerHandler(BaseHTTPRequestHandler):
    """One request: route it, answer it, never let an exception end the server."""

    protocol_version = "HTTP/1.1"
    server_version = "trainbudget-serve"

    def log_message(self, format: str, *args: object) -> None:
        """Quiet: the page polls as inputs change; a line per request would bury the URL."""

    def do_GET(self) -> None:
        url = urlsplit(self.path)
        if url.path in PAGE_FILES:
            name, kind = PAGE_FILES[url.path]
            self._send(HTTPStatus.OK, _page_file(name), kind)
        elif url.path == "/api/choices":
            self._send_json(HTTPStatus.OK, choices())
        elif url.path == "/api/estimate":
            self._answer(url.path, dict(parse_qsl(url.query, keep_blank_values=True)))
        else:
            self._send_json(HTTPStatus.NOT_FOUND, {"error": f"no such page: {url.path}"})

    def do_POST(self) -> None:
        path = urlsplit(self.path).path
        try:
            params = self._body()
        except SpecError as err:
            self._send_json(HTTPStatus.BAD_REQUEST, {"error": str(err), "field": err.field})
            return
        self._answer(path, params)

    def _body(self) -> dict:
        text = self.headers.get("Content-Length") or "0"
        length = int(text) if text.isdigit() else -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self.close_connection = True  # the body is left unread: the stream is out of step
            raise SpecError("Content-Length", text, f"must be a byte count of 0-{MAX_BODY_BYTES:,}")
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except (json.JSONDecodeError, UnicodeDecodeError):
            raise SpecError("request", None, "body must be a JSON object of inputs") from None
        if not isinstance(body, dict):
            raise SpecError("request", None, "body must be a JSON object of inputs")
        return body

    def _answer(self, path: str, params: dict) -> None:
        try:
            if path == "/api/estimate":
                self._send(HTTPStatus.OK, answer_bytes(question_from(params)), "application/json")
            elif path == "/api/commands":
                self._send_json(HTTPStatus.OK, {"commands": commands(question_from(params))})
            elif path == "/api/emit":
                self._emit(params)
            else:
                self._send_json(HTTPStatus.NOT_FOUND, {"error": f"no such endpoint: {path}"})
        except SpecError as err:
            self._send_json(HTTPStatus.BAD_REQUEST, {"error": str(err), "field": field_of(err)})
        except Exception as err:  # a bug: one line to the page, and keep serving
            message = f"internal error: {type(err).__name__}: {err}".splitlines()[0]
            self._send_json(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": message, "field": ""})

    def _emit(self, params: dict) -> None:
        params = dict(params)
        engine, rank = str(params.pop("engine", "")), params.pop("rank", 0)
        try:
            rank = int(rank)
        except (TypeError, ValueError):
            raise SpecError("rank", rank, "must be a whole number: 0 is the best plan") from None
        emitted = engine_file(question_from(params), rank, engine)
        self._send(
            HTTPStatus.OK,
            emitted.text.encode(),
            "text/plain; charset=utf-8",
            {"Content-Disposition": f'attachment; filename="{emitted.file_name}"'},
        )

    def _send_json(self, status: HTTPStatus, value: object) -> None:
        self._send(status, json.dumps(value).encode(), "application/json")

    def _send(self, status: HTTPStatus, body: bytes, kind: str, extra: dict | None = None) -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Cache-Control", "no-store")
        for key, value in (extra or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(body)


class PlannerServer(ThreadingHTTPServer):
    request_queue_size = 128
    """listen()'s backlog. socketserver's default of 5 resets connections once more than five
    arrive at once: measured, 20 clients connecting together lost 8 of their first 300
    requests (ECONNRESET) and waited 1 s (a SYN retry) at the 99th percentile."""
    daemon_threads = True  # a client holding a keep-alive connection never blocks the exit


def make_server(host: str = "127.0.0.1", port: int = 0) -> PlannerServer:
    """A bound server (port 0: the OS picks a free one; read it from `server_address`)."""
    return PlannerServer((host, port), PlannerHandler)
