import sys
import threading
from pathlib import Path

import pytest

# make tests/serve/png.py and browser.py importable by name (as tests/report/page_check.py is)
sys.path.insert(0, str(Path(__file__).parent))


@pytest.fixture(scope="module")
def base_url():
    """A planner server on a free loopback port, in this process, for the module's tests."""
    from trainbudget.serve.server import make_server

    server = make_server("127.0.0.1", 0)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    host, port = server.server_address[:2]
    yield f"http://{host}:{port}"
    server.shutdown()
    server.server_close()
