"""``piw serve`` for a test: the real command as a subprocess on a free loopback port (``docs/serve.md``)."""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.cli import PIW_COMMAND

SERVING = re.compile(r"Serving the piw API on (http://127\.0\.0\.1:\d+)")


@contextmanager
def page_server(home: Path, env: dict[str, str] | None = None) -> Iterator[str]:
    """``piw serve --port 0`` over ``home``; yields its base URL once it listens."""
    process = subprocess.Popen(
        [*PIW_COMMAND, "serve", "--port", "0"],
        env={**os.environ, "PIW_HOME": str(home), **(env or {})},
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    assert process.stdout is not None
    deadline = time.monotonic() + 60
    found = None
    while found is None:
        line = process.stdout.readline()
        assert line or process.poll() is None, "piw serve exited before it listened"
        found = SERVING.search(line)
        assert time.monotonic() < deadline, "piw serve did not start"
    try:
        yield found.group(1)
    finally:
        process.terminate()
        process.wait(timeout=30)
