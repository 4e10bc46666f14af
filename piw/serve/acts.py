"""The act routes: answer, decide, pause, resume, cancel, top up a budget, start a run (``docs/serve.md``, "Acting").

Each route calls the function its CLI command calls (``piw.service.answering``, ``piw.run.lifecycle``,
``piw.service.starting``), so the same checks, idempotency and one-line errors apply; a continuation or a started run
is left queued for ``piw host``, as with ``--detach``. ``answered_by`` is the token's name. A budget top-up spends
money, so it needs ``operate`` whichever route carries it.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, HTTPException, Request
from pydantic import BaseModel, ConfigDict, Field

from piw.serve.auth import Answerer, Operator
from piw.serve.reads import home_of, run_of
from piw.store.db.tokens import TokenRow
from piw.web.access import allows

router = APIRouter(prefix="/api")


class AnswerBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    answer: Any = Field(description="The answer as JSON, as 'piw answer RUN JSON' takes it.")


class DecideBody(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    choice: str = Field(description="One of the decision's choice ids.")
    text: str | dict[str, str] | None = Field(
        None, description="The text the choice takes, or its text fields by name."
    )
    request_sha256: str = Field(
        alias="requestSha256", description="The digest of the request the client showed (refused when stale)."
    )


class TopUpBody(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    top_up: dict[str, Any] = Field(
        alias="topUp", description='What to add to the budget, e.g. {"costUsd": 1.0, "modelRequests": 10}.'
    )


class StartBody(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)
    workflow: str = Field(description="A workflow id that 'piw list' (GET /api/workflows) shows.")
    input: Any = Field(default_factory=dict, description="The run input (a JSON object).")
    title: str | None = None
    idempotency_key: str | None = Field(None, alias="idempotencyKey", max_length=200)


def _receipt(receipt: Any) -> dict[str, Any]:
    return {**receipt.to_json(), "continuation": "queued"}


@router.post(
    "/runs/{run_id}/answer", summary="Answer a waiting checkpoint (as 'piw answer RUN JSON --detach')."
)
def answer(request: Request, run_id: str, body: AnswerBody, token: TokenRow = Answerer) -> dict[str, Any]:
    from piw.service.answering import answer_detached

    if isinstance(body.answer, dict) and "topUp" in body.answer and not allows(token.scope, "operate"):
        raise HTTPException(
            403, f"Token {token.name!r} has scope {token.scope}; a budget top-up needs operate."
        )
    home = home_of(request)
    return _receipt(answer_detached(home, run_of(request, run_id), body.answer, answered_by=token.name))


@router.post("/runs/{run_id}/decide", summary="Decide a human gate (as 'piw decide RUN CHOICE --detach').")
def decide(request: Request, run_id: str, body: DecideBody, token: TokenRow = Answerer) -> dict[str, Any]:
    from piw.service.answering import decide_detached

    receipt = decide_detached(
        home_of(request),
        run_of(request, run_id),
        body.choice,
        body.text,
        seen_sha256=body.request_sha256,
        answered_by=token.name,
    )
    return _receipt(receipt)


@router.post("/runs/{run_id}/budget", summary="Top up the budget of a run stopped by it.")
def top_up(request: Request, run_id: str, body: TopUpBody, token: TokenRow = Operator) -> dict[str, Any]:
    from piw.service.answering import answer_detached

    home = home_of(request)
    value = {"topUp": body.top_up}
    return _receipt(answer_detached(home, run_of(request, run_id), value, answered_by=token.name))


@router.post("/runs/{run_id}/pause", summary="Pause at the next step boundary (as 'piw pause').")
def pause(request: Request, run_id: str, _: TokenRow = Operator) -> dict[str, Any]:
    from piw.run.lifecycle import pause_run

    return pause_run(home_of(request), run_of(request, run_id)).to_json()


@router.post("/runs/{run_id}/resume", summary="Clear a pause and queue the run for 'piw host'.")
def resume(request: Request, run_id: str, _: TokenRow = Operator) -> dict[str, Any]:
    from piw.run.lifecycle import resume_queued

    return resume_queued(home_of(request), run_of(request, run_id)).to_json()


@router.post("/runs/{run_id}/cancel", summary="Cancel a run (as 'piw cancel').")
def cancel(request: Request, run_id: str, _: TokenRow = Operator) -> dict[str, Any]:
    from piw.run.lifecycle import cancel_run

    return cancel_run(home_of(request), run_of(request, run_id)).to_json()


@router.post(
    "/runs", summary="Start a run of an installed workflow (as 'piw run NAME --detach').", status_code=201
)
def start(request: Request, body: StartBody, _: TokenRow = Operator) -> dict[str, Any]:
    from piw.service.starting import start_discovered
    from piw.store.db.idempotency import Adopted

    started = start_discovered(home_of(request), body.workflow, body.input, body.title, body.idempotency_key)
    if isinstance(started, Adopted):
        return {"runId": started.run_id, "status": "adopted", "adopted": True}
    return {"runId": started.run_id, "status": started.status, "adopted": False}
