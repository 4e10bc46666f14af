"""A real headless Chromium driven over the DevTools protocol, for the answer page's test (``docs/channels.md``).

:func:`chromium` finds Debian's ``chromium`` (``.ci/run`` installs it when missing); :class:`Browser` starts it with
a throwaway profile and ``--remote-debugging-port=0``, reads the DevTools address it prints, and drives one tab:
navigate, click a button the way a person would (a mouse press and release at its centre, so the browser submits
the form itself) and read the page text. The page under test has no script; only this driver talks to DevTools.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp

DEVTOOLS = re.compile(r"DevTools listening on (ws://[^\s]+)")


def chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    def __init__(self, executable: str) -> None:
        self.profile = Path(tempfile.mkdtemp(prefix="piw-chromium-"))
        self.process = subprocess.Popen(
            [
                executable,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--disable-dev-shm-usage",
                "--no-first-run",
                "--no-default-browser-check",
                "--remote-debugging-address=127.0.0.1",
                "--remote-debugging-port=0",
                f"--user-data-dir={self.profile}",
                "about:blank",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.process.stderr is not None
        deadline = time.monotonic() + 60
        found = None
        while found is None:
            line = self.process.stderr.readline()
            assert line or self.process.poll() is None, "chromium exited before DevTools started"
            found = DEVTOOLS.search(line)
            assert time.monotonic() < deadline, "chromium did not start DevTools"
        port = found.group(1).split(":")[2].split("/")[0]
        self.base = f"http://127.0.0.1:{port}"

    def close(self) -> None:
        self.process.kill()
        self.process.wait(timeout=30)
        shutil.rmtree(self.profile, ignore_errors=True)

    def page_socket(self) -> str:
        with urllib.request.urlopen(f"{self.base}/json/list", timeout=10) as response:
            targets = json.load(response)
        (page,) = [t for t in targets if t.get("type") == "page"][:1]
        return str(page["webSocketDebuggerUrl"])

    def run(self, script: Callable[[Tab], Awaitable[Any]]) -> Any:
        """Run ``script`` with the browser's tab (one DevTools session)."""

        async def main() -> Any:
            async with aiohttp.ClientSession() as session, session.ws_connect(self.page_socket()) as ws:
                tab = Tab(ws)
                await tab.call("Page.enable")
                return await script(tab)

        return asyncio.run(main())


class Tab:
    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        self.events: list[dict[str, Any]] = []

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        ident = next(self.ids)
        await self.ws.send_json({"id": ident, "method": method, "params": params})
        while True:
            message = await asyncio.wait_for(self.ws.receive_json(), timeout=30)
            if message.get("id") == ident:
                assert "error" not in message, message
                return dict(message.get("result") or {})
            self.events.append(message)

    async def loaded(self) -> None:
        """Wait for the next ``Page.loadEventFired``."""
        while True:
            if any(e.get("method") == "Page.loadEventFired" for e in self.events):
                self.events.clear()
                return
            self.events.append(await asyncio.wait_for(self.ws.receive_json(), timeout=30))

    async def goto(self, url: str) -> None:
        self.events.clear()
        await self.call("Page.navigate", url=url)
        await self.loaded()

    async def text(self) -> str:
        found = await self.call("Runtime.evaluate", expression="document.body.innerText", returnByValue=True)
        return str(found["result"]["value"])

    async def status(self) -> int:
        """The HTTP status of the page shown now (from the navigation timing entry)."""
        found = await self.call(
            "Runtime.evaluate",
            expression="performance.getEntriesByType('navigation')[0].responseStatus",
            returnByValue=True,
        )
        return int(found["result"]["value"])

    async def click(self, selector: str) -> None:
        """Press and release the mouse at the centre of ``selector``'s element, then wait for the next page."""
        document = await self.call("DOM.getDocument")
        node = await self.call("DOM.querySelector", nodeId=document["root"]["nodeId"], selector=selector)
        assert node.get("nodeId"), f"no element {selector}"
        box = await self.call("DOM.getBoxModel", nodeId=node["nodeId"])
        quad = box["model"]["content"]
        x, y = (quad[0] + quad[4]) / 2, (quad[1] + quad[5]) / 2
        self.events.clear()
        for kind in ("mousePressed", "mouseReleased"):
            await self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)
        await self.loaded()
