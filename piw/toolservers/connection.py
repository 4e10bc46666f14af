"""One MCP server session, driven from a private event-loop thread so the synchronous agent loop can call it.

The SDK (``piw[mcp]``) is asynchronous; an agent step's tools are plain functions called on the loop's thread.
Each connection therefore owns one thread running an asyncio loop that holds the transport and the
``ClientSession`` open (a stdio subprocess in its own process group, or a streamable-HTTP client) from
:meth:`McpConnection.start` to :meth:`McpConnection.close`; a call is a coroutine handed to that loop, waited for
with the call's timeout and the step's cancel event. Whatever goes wrong (a program that is not there, a server
that never answers ``initialize``, one that dies mid-call, an HTTP error) comes back as an :class:`McpFailure`
with a message meant for the model and the step card, plus the tail of the server's stderr — never a traceback
(``docs/tools-mcp.md``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import tempfile
import threading
import time
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from piw.config.mcp_servers import McpServerConfig
from piw.errors import NeedsKey, PiwError

STDERR_TAIL_CHARS = 2_000
"""Characters of a server's stderr kept for error messages (its last lines usually say what went wrong)."""
STDERR_LINES = 3
"""Lines of that tail quoted in the error the model and the card read."""
STDERR_LINE_CHARS = 160
STOP_WAIT_S = 10.0
"""How long :meth:`McpConnection.close` waits for the SDK's shutdown (stdin closed, then TERM, then KILL)."""
_POLL_S = 0.05


class McpFailure(Exception):
    """A server could not start, or a call failed at the transport: the message says which and why."""

    def __init__(self, message: str, stderr_tail: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.stderr_tail = stderr_tail

    def describe(self) -> str:
        """The message, then the server's last few stderr lines (squeezed, so a card shows them), if any.

        The whole tail (up to :data:`STDERR_TAIL_CHARS`) stays in the result's ``details``; the model and the one-line
        views get the lines that usually say what went wrong: the last ones.
        """
        lines = [" ".join(line.split())[:STDERR_LINE_CHARS] for line in self.stderr_tail.splitlines()]
        shown = [line for line in lines if line][-STDERR_LINES:]
        if not shown:
            return self.message
        return self.message + "\nServer stderr (last lines):\n" + "\n".join(shown)


@dataclass(frozen=True)
class CallReply:
    """What a ``tools/call`` returned: the result's content blocks and whether the server flagged an error."""

    content: list[dict[str, Any]]
    structured: Any
    is_error: bool


def leaf_error(exc: BaseException) -> BaseException:
    """The first real exception inside (nested) exception groups, which anyio task groups raise."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def error_text(exc: BaseException) -> str:
    """``Type: message`` of the innermost error, on one line."""
    inner = leaf_error(exc)
    text = str(inner).strip() or type(inner).__name__
    if isinstance(inner, OSError) and inner.strerror:
        text = f"{inner.strerror}: {inner.filename}" if inner.filename else inner.strerror
    return " ".join(text.split())


class McpConnection:
    """A started (or failed) MCP server: its tool listing, calls, stderr tail and shutdown."""

    def __init__(
        self, name: str, config: McpServerConfig, *, cwd: Path, env: Mapping[str, str] | None = None
    ) -> None:
        self.name = name
        self.config = config
        self.cwd = Path(config.cwd) if config.cwd else cwd
        self._env = env
        self._stderr = tempfile.TemporaryFile("w+", encoding="utf-8", errors="replace")  # noqa: SIM115
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._run, name=f"piw-mcp-{name}", daemon=True)
        self._ready: concurrent.futures.Future[list[dict[str, Any]]] = concurrent.futures.Future()
        self._stop: asyncio.Event | None = None
        self._session: Any = None
        self._ended = threading.Event()
        self.failure: McpFailure | None = None
        """Why the session ended before :meth:`close`, if it did (the server exited, the endpoint went away)."""

    # ---- lifecycle -------------------------------------------------------------------------------------

    def begin(self) -> None:
        """Start the server in the background; :meth:`wait_ready` gets its listing (servers start in parallel)."""
        self._thread.start()

    def wait_ready(self) -> list[dict[str, Any]]:
        """The server's tools as ``{name, description, inputSchema}``; :class:`McpFailure` when it did not start."""
        deadline = time.monotonic() + self.config.start_timeout_s
        while True:
            try:
                return self._ready.result(timeout=_POLL_S)
            except concurrent.futures.TimeoutError:
                if time.monotonic() >= deadline:
                    self.close()
                    raise McpFailure(
                        f"MCP server {self.name!r} did not start within {self.config.start_timeout_s:g} s.",
                        self.stderr_tail(),
                    ) from None
            except McpFailure:
                raise

    def close(self) -> None:
        """Stop the server (stdio: stdin closed, then its process group signalled) and wait a bounded time."""
        if self._thread.is_alive() and self._session is not None and self._stop is not None:
            self._loop.call_soon_threadsafe(self._stop.set)
        elif self._thread.is_alive():  # still starting (a server that never answers): cancel the start
            self._loop.call_soon_threadsafe(self._cancel_all)
        if self._thread.ident is not None:
            self._thread.join(STOP_WAIT_S)
        if not self._thread.is_alive():
            self._stderr.close()

    def _cancel_all(self) -> None:
        for task in asyncio.all_tasks(self._loop):
            task.cancel()

    def stderr_tail(self) -> str:
        """The last :data:`STDERR_TAIL_CHARS` characters the server wrote to stderr (stdio servers only)."""
        try:
            fd = self._stderr.fileno()
            size = os.fstat(fd).st_size
            data = os.pread(fd, STDERR_TAIL_CHARS * 2, max(0, size - STDERR_TAIL_CHARS * 2))
        except (OSError, ValueError):
            return ""
        text = data.decode("utf-8", errors="replace")[-STDERR_TAIL_CHARS:]
        return text if size <= len(data) else "…" + text.split("\n", 1)[-1]

    # ---- calls -----------------------------------------------------------------------------------------

    def call(
        self, tool: str, arguments: dict[str, Any], timeout_s: float, cancel: threading.Event
    ) -> CallReply:
        """Call ``tool``; :class:`McpFailure` on a timeout, a cancel, a dead server or a transport error."""
        if self._session is None or self._ended.is_set() or self.failure is not None:
            raise McpFailure(self._gone_message(), self.stderr_tail())
        future = asyncio.run_coroutine_threadsafe(self._call(tool, arguments, timeout_s), self._loop)
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                return future.result(timeout=_POLL_S)
            except concurrent.futures.TimeoutError:
                stopped = None
                if cancel.is_set():
                    stopped = "the step was cancelled or ran out of time"
                elif time.monotonic() >= deadline:
                    stopped = f"no reply within {timeout_s:g} s"
                elif self._ended.is_set():
                    stopped = self._gone_message()
                if stopped is not None:
                    future.cancel()
                    raise McpFailure(
                        f"MCP server {self.name!r}: {tool} stopped: {stopped}.", self.stderr_tail()
                    ) from None
            except (concurrent.futures.CancelledError, asyncio.CancelledError):
                raise McpFailure(
                    f"MCP server {self.name!r}: {tool} was cancelled.", self.stderr_tail()
                ) from None
            except McpFailure:
                raise
            except Exception as exc:
                if self.failure is not None:
                    message = f"MCP server {self.name!r} exited or closed the connection during {tool}."
                else:
                    message = f"MCP server {self.name!r}: {tool} failed: {error_text(exc)}"
                raise McpFailure(message, self.stderr_tail()) from None

    def _gone_message(self) -> str:
        if self.failure is not None:
            return self.failure.message
        return f"MCP server {self.name!r} is not running (it exited or closed the connection)."

    async def _call(self, tool: str, arguments: dict[str, Any], timeout_s: float) -> CallReply:
        from mcp import MCPError

        try:
            result = await self._session.call_tool(
                tool, arguments, read_timeout_seconds=timeout_s + 1.0
            )  # ours speaks first
        except MCPError as exc:
            if "connection closed" in str(exc).lower():  # the server process died or hung up
                self.failure = McpFailure(
                    f"MCP server {self.name!r} is not running (it exited or closed the connection).",
                    self.stderr_tail(),
                )
            raise
        content = [
            block.model_dump(by_alias=True, exclude_none=True, mode="json") for block in result.content
        ]
        return CallReply(content, result.structured_content, bool(result.is_error))

    # ---- the loop thread -------------------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        try:
            self._loop.run_until_complete(self._main())
        finally:
            self._ended.set()
            self._loop.close()

    async def _main(self) -> None:
        self._stop = asyncio.Event()
        try:
            async with AsyncExitStack() as stack:
                session = await self._open(stack)
                tools = await self._list_tools(session)
                self._session = session
                self._ready.set_result(tools)
                await self._stop.wait()
        except BaseException as exc:  # the SDK's task groups raise groups; the thread must end cleanly
            failure = self._failure_of(exc)
            if not self._ready.done():
                self._ready.set_exception(failure)
            elif not (self._stop is not None and self._stop.is_set()):
                self.failure = failure

    def _failure_of(self, exc: BaseException) -> McpFailure:
        inner = leaf_error(exc)
        if isinstance(inner, McpFailure):
            return inner
        if isinstance(inner, NeedsKey):  # an unset $NAME in env or headers
            return McpFailure(
                f"MCP server {self.name!r} was not started: environment variable {inner.variable} is not set "
                f"(named in [mcp.{self.name}] of config.toml)."
            )
        if isinstance(inner, PiwError):
            return McpFailure(f"MCP server {self.name!r} was not started: {inner}")
        where = self.config.describe() if self.config.transport == "http" else self.config.command[0]  # type: ignore[index]
        return McpFailure(
            f"MCP server {self.name!r} ({where}) failed: {error_text(inner)}", self.stderr_tail()
        )

    async def _open(self, stack: AsyncExitStack) -> Any:
        from mcp import ClientSession, StdioServerParameters, stdio_client

        config = self.config
        if config.command is not None:
            params = StdioServerParameters(
                command=config.command[0],
                args=config.command[1:],
                env=config.resolved_env(self._env),
                cwd=self.cwd,
            )
            read, write = await stack.enter_async_context(stdio_client(params, errlog=self._stderr))
        else:
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            client = await stack.enter_async_context(
                create_mcp_http_client(headers=config.resolved_headers(self._env))
            )
            read, write = await stack.enter_async_context(
                streamable_http_client(str(config.url), http_client=client)
            )
        session = await stack.enter_async_context(ClientSession(read, write))
        await session.initialize()
        return session

    async def _list_tools(self, session: Any) -> list[dict[str, Any]]:
        from mcp.types import PaginatedRequestParams

        tools: list[dict[str, Any]] = []
        cursor: str | None = None
        for _page in range(100):  # a server that pages forever cannot hang the step
            params = None if cursor is None else PaginatedRequestParams(cursor=cursor)
            listing = await session.list_tools(params=params)
            for tool in listing.tools:
                tools.append(
                    {
                        "name": tool.name,
                        "description": tool.description or "",
                        "inputSchema": dict(tool.input_schema or {"type": "object"}),
                    }
                )
            cursor = listing.next_cursor
            if not cursor:
                break
        return tools
