"""piw's errors as HTTP responses: the status a client can act on, and the same one line the CLI prints.

A body is always ``{"error": LINE}``; ``LINE`` is the message ``piw`` would print after ``Error:``
(``docs/serve.md``, "Errors").
"""

from __future__ import annotations

from fastapi import Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from piw.errors import (
    AnswerInvalid,
    ContinuationExists,
    DecisionResolved,
    IdempotencyConflict,
    InputInvalid,
    PiwError,
    RequestChanged,
    ResumeRefused,
    RunLocked,
    RunNotFound,
    StoreBusy,
    UsageError,
)
from piw.terminal import single_line

_STATUS: tuple[tuple[type[PiwError], int], ...] = (
    (ContinuationExists, 409),
    (DecisionResolved, 409),
    (IdempotencyConflict, 409),
    (RunLocked, 409),
    (RequestChanged, 409),
    (ResumeRefused, 409),
    (RunNotFound, 404),
    (AnswerInvalid, 422),
    (InputInvalid, 422),
    (UsageError, 400),
    (StoreBusy, 503),
)


def status_of(error: PiwError) -> int:
    """409 for a lost race, 404 for an unknown run, 422/400 for bad input, 503 when busy; otherwise 400 for what
    the CLI calls a usage error (exit 2) and 500 for the rest."""
    for kind, status in _STATUS:
        if isinstance(error, kind):
            return status
    return 400 if error.exit_code == 2 else 500


def error_body(message: str) -> dict[str, str]:
    return {"error": single_line(message)}


async def piw_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, PiwError)
    return JSONResponse(error_body(str(exc)), status_code=status_of(exc))


async def invalid_request(request: Request, exc: Exception) -> JSONResponse:
    """A body or query that does not fit the route: one line naming the first field, as the CLI does."""
    assert isinstance(exc, RequestValidationError)
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body") or "request"
    return JSONResponse(error_body(f"{where}: {first.get('msg', 'invalid')}."), status_code=422)
