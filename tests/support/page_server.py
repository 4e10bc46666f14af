"""The answer page served for a test: a real HTTP server in its own process on a free loopback port."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

APP = """
import sys
from pathlib import Path
import uvicorn
from fastapi import FastAPI
from piw.channels.page_routes import answer_router

app = FastAPI()
app.include_router(answer_router(Path(sys.argv[1])))
uvicorn.run(app, host="127.0.0.1", port=int(sys.argv[2]), log_level="warning")
"""


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextmanager
def page_server(home: Path) -> Iterator[str]:
    """Serve ``home``'s answer page; yields its base URL."""
    port = free_port()
    env = {**os.environ, "PIW_HOME": str(home)}
    process = subprocess.Popen([sys.executable, "-c", APP, str(home), str(port)], env=env)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            urllib.request.urlopen(f"{url}/answer/probe", timeout=2)
        except urllib.error.HTTPError:
            break  # it answers (410 for an unknown token)
        except OSError:
            assert process.poll() is None and time.monotonic() < deadline, "the page server did not start"
            time.sleep(0.05)
    try:
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)
