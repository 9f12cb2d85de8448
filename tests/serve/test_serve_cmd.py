"""`trainbudget serve` as a user runs it: a process that prints its URL, answers there, binds
loopback unless told otherwise, and stops on Ctrl-C with exit 130 and one line."""

import json
import os
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path

from clirun import one_line_error

SRC = str(Path(__file__).resolve().parents[2] / "src")
STARTUP_SECONDS = 60  # a loaded CI machine may take seconds to import and bind


def start(*argv: str) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": SRC}
    return subprocess.Popen(
        [sys.executable, "-m", "trainbudget", "serve", *argv],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def test_serve_prints_a_loopback_url_answers_there_and_stops_on_ctrl_c():
    proc = start("--port", "0")
    try:
        line = proc.stdout.readline()  # blocks until the server is listening
        assert line.startswith("trainbudget serve: the planner page is at http://127.0.0.1:")
        url = line.split(" at ")[1].split()[0]
        with urllib.request.urlopen(url + "api/choices", timeout=STARTUP_SECONDS) as response:
            assert "llama-3-8b" in json.loads(response.read())["model"]
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=STARTUP_SECONDS)
    finally:
        proc.kill()
    assert proc.returncode == 130
    assert err == "trainbudget serve: stopped (Ctrl-C)\n"  # one line, no traceback


def test_the_server_process_imports_no_torch():
    probe = (
        "import sys, trainbudget.cli.plan.serve_cmd, trainbudget.serve.server;"
        "print('torch' in sys.modules)"
    )
    env = {**os.environ, "PYTHONPATH": SRC}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr


def test_a_bad_port_is_one_line():
    assert one_line_error(("serve", "--port", "70000")).endswith(
        "--port = '70000': must be 0-65535 (0 = any free port)"
    )
    assert "--port = 'eighty'" in one_line_error(("serve", "--port", "eighty"))


def test_a_port_in_use_is_one_line():
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        line = one_line_error(("serve", "--port", str(port)))
    assert line.startswith(f"trainbudget serve: error: --port = '{port}': cannot listen on ")
