"""``piw providers --check`` tests each configured provider and says what failed (issue 26, "confusing").

Against the loopback stub (``piw.testing.OpenAIStub``: its ``GET /v1/models``), a closed loopback port, a wrong path,
an unset key variable and a scripted provider whose replies file is missing. One request each, bounded, never a
chat turn when the server lists its models.
"""

from __future__ import annotations

import json
import socket
import textwrap
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

from piw.testing import OpenAIStub
from tests.support.cli import Cli


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _config(cli: Cli, stub: OpenAIStub, dead: str) -> None:
    (cli.home / "config.toml").write_text(
        textwrap.dedent(
            f"""
            default = "good/stub-model"
            [providers.good]
            base_url = "{stub.base_url}"
            api_key = "$STUB_KEY"
            models = ["stub-model", "other-model"]
            [providers.dead]
            base_url = "{dead}"
            models = ["m"]
            [providers.lost]
            base_url = "{stub.base_url.removesuffix("/v1")}/v2"
            models = ["m"]
            [providers.nokey]
            base_url = "{stub.base_url}"
            api_key = "$PIW_CHECK_UNSET_KEY"
            models = ["stub-model"]
            [providers.offline]
            api = "scripted"
            script = "missing.replies.json"
            """
        ),
        encoding="utf-8",
    )


def test_each_provider_is_tested_and_what_failed_is_said(cli: Cli, openai_stub: OpenAIStub) -> None:
    dead = f"http://127.0.0.1:{_closed_port()}/v1"
    _config(cli, openai_stub, dead)
    began = time.monotonic()
    done = cli("providers", "--check", env={"STUB_KEY": "sk-check-secret-1234", "COLUMNS": "300"})
    took = time.monotonic() - began
    assert done.returncode == 1, done.stderr  # some failed
    lines = {line.split()[0]: line for line in done.stdout.splitlines()}
    assert set(lines) == {"dead", "good", "lost", "nokey", "offline"}

    good = lines["good"]
    assert good.split()[1] == "ok"
    assert f"GET {openai_stub.base_url}/models: 200; lists 1 model; not among them: other-model" in good
    dead_line = lines["dead"]
    assert dead_line.split()[1] == "failed"
    assert f"cannot reach provider 'dead' at {dead}" in dead_line and "Connection refused" in dead_line
    lost = lines["lost"]
    assert lost.split()[1] == "failed" and "HTTP 404: no route /v2/chat/completions" in lost
    assert lines["nokey"].split()[1] == "failed"
    assert "Environment variable PIW_CHECK_UNSET_KEY is not set" in lines["nokey"]
    offline = lines["offline"]
    assert offline.split()[1] == "failed" and "missing.replies.json does not exist" in offline

    assert openai_stub.request_count == 0  # a server that lists its models is never asked for a chat turn
    assert "sk-check-secret-1234" not in done.stdout
    assert took < 10  # the closed port fails at once; every request is bounded by 5 s


def test_check_json_adds_the_result_to_each_provider(cli: Cli, openai_stub: OpenAIStub) -> None:
    (cli.home / "config.toml").write_text(
        f'[providers.good]\nbase_url = "{openai_stub.base_url}"\nmodels = ["stub-model"]\n', encoding="utf-8"
    )
    done = cli("providers", "--check", "--json")
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(done.stdout)
    assert row["name"] == "good" and row["check"]["ok"] is True
    assert row["check"]["detail"] == f"GET {openai_stub.base_url}/models: 200; lists 1 model"
    assert isinstance(row["check"]["elapsedMs"], int)
    plain = cli("providers", "--check")
    assert plain.returncode == 0 and plain.stdout.startswith("good  ok ")


def test_without_check_nothing_is_requested(cli: Cli) -> None:
    dead = f"http://127.0.0.1:{_closed_port()}/v1"
    (cli.home / "config.toml").write_text(
        f'[providers.dead]\nbase_url = "{dead}"\nmodels = ["m"]\n', encoding="utf-8"
    )
    done = cli("providers")
    assert done.returncode == 0 and "dead" in done.stdout and "failed" not in done.stdout


class _NoModelsList(BaseHTTPRequestHandler):
    """A server without ``GET /models`` that answers chat completions (records their bodies)."""

    bodies: ClassVar[list[dict[str, Any]]] = []

    def log_message(self, format: str, *args: Any) -> None:
        return

    def do_GET(self) -> None:
        self._answer(404, {"error": {"message": "not found"}})

    def do_POST(self) -> None:
        self.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self._answer(200, {"choices": [{"index": 0, "message": {"role": "assistant", "content": "p"}}]})

    def _answer(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def test_a_server_without_a_models_list_gets_one_one_token_request(cli: Cli) -> None:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _NoModelsList)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/v1"
        (cli.home / "config.toml").write_text(f'[providers.bare]\nbase_url = "{url}"\nmodels = ["m"]\n')
        done = cli("providers", "--check", env={"COLUMNS": "300"})
    finally:
        server.shutdown()
        server.server_close()
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"bare  ok      POST {url}/chat/completions: 200 (the server has no models list" in done.stdout
    (body,) = _NoModelsList.bodies
    assert body["model"] == "m" and body["max_tokens"] == 1
