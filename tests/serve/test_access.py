"""Who may reach ``piw serve`` (issue 31.2): tokens shown once and stored as hashes, scopes, expiry and revocation,
failed authentication limited and never explained, loopback unless tokens exist, CORS off unless configured, and
no token in any trace, database row or log line.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

import httpx2
import pytest

from tests.serve.test_answers import GATE, waiting_run
from tests.support.cli import Cli
from tests.support.runs import WorkflowMaker
from tests.support.serve import create_token, served


def files_holding(root: Path, secret: str) -> list[Path]:
    needle = secret.encode()
    return [path for path in root.rglob("*") if path.is_file() and needle in path.read_bytes()]


def test_a_token_is_printed_once_and_only_its_hash_is_kept(cli: Cli, piw_home: Path) -> None:
    created = cli("tokens", "create", "ci-bot", "--scope", "operate", "--expires", "30d")
    assert created.returncode == 0, created.stderr
    token = created.stdout.strip().splitlines()[-1]
    assert token.startswith("piw_") and len(token) > 40
    assert "shown only now" in created.stdout
    listed = cli("tokens", "list")
    assert "ci-bot  operate  active" in listed.stdout and token not in listed.stdout
    rows = cli.json("tokens", "list")
    assert rows[0]["name"] == "ci-bot" and rows[0]["expiresAt"] > rows[0]["createdAt"]
    assert token not in json.dumps(rows)
    assert files_holding(piw_home, token) == []
    with sqlite3.connect(piw_home / "piw.sqlite") as db:
        stored = db.execute("SELECT token_sha256 FROM api_tokens WHERE name = 'ci-bot'").fetchone()[0]
    assert stored == hashlib.sha256(token.encode()).hexdigest()
    for args, message in (
        (("create", "ci-bot"), "A token named 'ci-bot' exists"),
        (("create", "x", "--scope", "admin"), "--scope 'admin' is not a scope"),
        (("create", "x", "--expires", "soon"), "--expires 'soon' is not a duration"),
        (("create", "bad name"), "Token name 'bad name' must be"),
        (("revoke", "nobody"), "No active token is named 'nobody'"),
        (("rotate",), "Unknown action 'rotate'"),
    ):
        done = cli("tokens", *args)
        assert done.returncode == 2 and done.stderr.startswith(f"Error: {message}"), (args, done.stderr)


@pytest.mark.long
def test_revoked_and_expired_tokens_are_refused_like_any_wrong_token(cli: Cli, piw_home: Path) -> None:
    keep = create_token(cli, "keep", "read")
    gone = create_token(cli, "gone", "read")
    old = create_token(cli, "old", "read")
    with sqlite3.connect(piw_home / "piw.sqlite") as db:
        db.execute("UPDATE api_tokens SET expires_at = 1 WHERE name = 'old'")
    with served(cli) as api:
        assert api.get("/api/runs", gone).status_code == 200
        assert cli("tokens", "revoke", "gone").returncode == 0
        answers = {
            name: api.get("/api/runs", token)
            for name, token in (("keep", keep), ("gone", gone), ("old", old))
        }
        missing = api.get("/api/runs")
    assert answers["keep"].status_code == 200
    refusals = [answers["gone"], answers["old"], missing]
    assert {response.status_code for response in refusals} == {401}
    assert len({response.text for response in refusals}) == 1, "never says which part was wrong"
    states = {row["name"]: row["state"] for row in cli.json("tokens", "list")}
    assert states == {"keep": "active", "gone": "revoked", "old": "expired"}


def test_failed_authentication_is_rate_limited(cli: Cli) -> None:
    token = create_token(cli, "real", "read")
    with served(cli) as api:
        with api.client("piw_guess") as client:
            statuses = [client.get("/api/runs").status_code for _ in range(10)]
        blocked = api.get("/api/runs", token)
    assert statuses == [401] * 10
    assert blocked.status_code == 429, "the address is refused for a while, whatever it sends"
    assert "Too many failed authentication attempts" in blocked.json()["error"]
    assert blocked.headers["Retry-After"] == "60"


def test_binding_another_address_without_tokens_is_refused(cli: Cli) -> None:
    for command in (("serve", "--host", "0.0.0.0"), ("view", "--serve", "--host", "0.0.0.0")):
        done = cli(*command, "--port", "0" if command[0] == "serve" else "8799")
        assert done.returncode == 2, done
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "(not loopback) needs API tokens" in lines[0], done.stderr
        assert "piw tokens create" in lines[0]


def test_loopback_without_tokens_prints_a_session_token_once(cli: Cli) -> None:
    with served(cli) as api:
        line = next(line for line in api.lines if "this session's token" in line)
        token = line.split("until it stops): ")[1].split()[0]
        assert api.get("/api/runs", token).status_code == 200
        assert api.get("/api/runs").status_code == 401
        output = api.output
    assert output.count(token) == 1


@pytest.mark.long
def test_cors_is_off_unless_an_origin_is_configured(cli: Cli) -> None:
    token = create_token(cli, "web", "read")
    preflight = {"Origin": "https://dash.example", "Access-Control-Request-Method": "GET"}
    with served(cli) as api, api.client(token) as client:
        plain = client.get("/api/runs", headers={"Origin": "https://dash.example"})
        asked = client.options("/api/runs", headers=preflight)
    assert plain.status_code == 200 and "access-control-allow-origin" not in plain.headers
    assert "access-control-allow-origin" not in asked.headers
    with served(cli, "--cors-origin", "https://dash.example") as api, api.client(token) as client:
        allowed = client.options("/api/runs", headers=preflight)
        foreign = client.options("/api/runs", headers={**preflight, "Origin": "https://evil.example"})
    assert allowed.headers["access-control-allow-origin"] == "https://dash.example"
    assert "access-control-allow-origin" not in foreign.headers


@pytest.mark.long
def test_a_request_for_another_host_name_is_refused(cli: Cli) -> None:
    token = create_token(cli, "web", "read")
    with served(cli) as api, api.client(token) as client:
        rebound = client.get("/api/runs", headers={"Host": "evil.example"})
        own = client.get("/api/runs")
    assert rebound.status_code == 403 and own.status_code == 200


def test_a_token_never_appears_in_traces_databases_or_logs(
    cli: Cli, piw_home: Path, make_workflow: WorkflowMaker
) -> None:
    run = waiting_run(cli, make_workflow("gate", GATE))
    run_id, digest = run["runId"], run["finalOutput"]["requestSha256"]
    token = create_token(cli, "alice", "operate")
    with served(cli) as api:
        with api.client(token) as client:
            assert client.get(f"/api/runs/{run_id}").status_code == 200
            assert client.get("/api/runs", params={"token": token}).status_code == 200
            decided = client.post(
                f"/api/runs/{run_id}/decide", json={"choice": "no", "requestSha256": digest}
            )
            assert decided.status_code == 200, decided.text
            with client.stream("GET", f"/api/runs/{run_id}/events", params={"after": 0}) as events:
                assert any("run_waiting" in line for line in events.iter_lines())
        httpx2.get(api.url + "/api/runs", headers={"Authorization": f"Bearer {token}x"})
        output = api.output
    assert cli("host", "--once").returncode == 0
    assert token not in output
    assert files_holding(piw_home, token) == []
    assert cli.json("inspect", run_id)["decision"]["answeredBy"] == "alice"


def test_view_serve_accepts_an_api_token_and_limits_failures(cli: Cli, tmp_path: Path) -> None:
    import re
    import socket
    import subprocess
    import time

    from tests.support.cli import PIW_COMMAND

    token = create_token(cli, "viewer", "read")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = int(probe.getsockname()[1])
    err = tmp_path / "view.err"
    with err.open("wb") as sink:
        process = subprocess.Popen(
            [*PIW_COMMAND, "view", "--serve", "--port", str(port)],
            env=cli.environment(),
            stdout=subprocess.DEVNULL,
            stderr=sink,
            stdin=subprocess.DEVNULL,
        )
    try:
        deadline = time.monotonic() + 30
        while not re.search(r"Serving piw view on ", err.read_text("utf-8")):
            assert process.poll() is None and time.monotonic() < deadline, err.read_text()
            time.sleep(0.05)
        base = f"http://127.0.0.1:{port}"

        def get(value: str) -> httpx2.Response:  # a fresh client each time: no cookie carried over
            return httpx2.get(f"{base}/", params={"token": value}, timeout=10, follow_redirects=False)

        opened = get(token)
        wrong = [get("piw_wrong").status_code for _ in range(10)]
        blocked = get(token)
    finally:
        process.terminate()
        process.wait(30)
    assert opened.status_code == 303 and "set-cookie" in opened.headers
    assert wrong == [403] * 10
    assert blocked.status_code == 429
    assert token not in err.read_text()
