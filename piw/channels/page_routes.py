"""The answer page's routes, for ``piw serve`` to mount: ``app.include_router(answer_router(home))``
(``docs/channels.md``, "The answer page"; the page itself is ``piw.channels.page``).

No ``from __future__ import annotations`` here: FastAPI reads the handlers' annotations as objects.
"""

from pathlib import Path

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse
from starlette.concurrency import run_in_threadpool

from piw.channels.page import HEADERS, answer, show


def answer_router(home: Path) -> APIRouter:
    """``GET /answer/{token}`` shows the page, ``POST /answer/{token}`` records the answer its form posts."""
    router = APIRouter()

    @router.get("/answer/{token}", response_class=HTMLResponse, include_in_schema=False)
    async def answer_page(token: str) -> HTMLResponse:
        status, page = await run_in_threadpool(show, home, token)
        return HTMLResponse(page, status_code=status, headers=HEADERS)

    @router.post("/answer/{token}", response_class=HTMLResponse, include_in_schema=False)
    async def answer_post(token: str, request: Request) -> HTMLResponse:
        body = await request.body()
        client = request.client.host if request.client else "?"
        status, page = await run_in_threadpool(answer, home, token, body, client)
        return HTMLResponse(page, status_code=status, headers=HEADERS)

    return router
