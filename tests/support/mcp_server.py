"""A real MCP server for the tests, written with the SDK's own server API (``MCPServer``).

``python mcp_server.py stdio`` serves over stdio; ``python mcp_server.py http PORT_FILE`` serves streamable HTTP
on a free loopback port and writes the port to ``PORT_FILE``. Every ``search`` call is appended to the file named
by ``MCP_CALLS_FILE``, so a test counts real calls; ``crash`` writes to stderr and kills the server; ``whoami``
answers with ``MCP_TOKEN`` (a configured secret the trace must never hold).
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError

app = MCPServer("notes")


@app.tool()
def search(query: str) -> str:
    """Search the notes for a query."""
    with open(os.environ["MCP_CALLS_FILE"], "a", encoding="utf-8") as calls:
        calls.write(query + "\n")
    return f"found 1 note about {query}"


@app.tool()
def crash() -> str:
    """Crash the server (for tests)."""
    print("fatal: the notes index is corrupt", file=sys.stderr, flush=True)
    os._exit(3)


@app.tool()
def locked() -> str:
    """Open a locked note (always fails: the server answers with an error result)."""
    raise ToolError("the note is locked")


@app.tool()
def whoami() -> str:
    """Tell who the server acts for."""
    return f"token {os.environ.get('MCP_TOKEN', '')}"


@app.tool()
def slow(seconds: float) -> str:
    """Sleep, then answer."""
    time.sleep(seconds)
    return "done"


def serve_http(port_file: Path) -> None:
    import anyio
    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    server = uvicorn.Server(uvicorn.Config(app.streamable_http_app(), log_level="warning"))
    port_file.write_text(str(sock.getsockname()[1]), encoding="utf-8")
    anyio.run(lambda: server.serve(sockets=[sock]))


if __name__ == "__main__":
    if os.environ.get("MCP_HIDE_CRASH"):  # the server of a later visit offers fewer tools
        app.remove_tool("crash")
    if sys.argv[1:2] == ["http"]:
        serve_http(Path(sys.argv[2]))
    else:
        if os.environ.get("MCP_FAIL_AT_START"):
            print("cannot open the notes database", file=sys.stderr, flush=True)
            sys.exit(1)
        app.run("stdio")
