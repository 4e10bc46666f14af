"""The answer page of ``piw serve``: what an answer link opens (``docs/channels.md``, "The answer page").

``GET /answer/{token}`` shows the waiting request (title, subject, summary, blocks), its digest, and one plain
HTML form per choice (a text area for each text a choice needs); ``POST /answer/{token}`` records the answer
through :func:`piw.channels.answer.answer_with_token`, the same one-winner path as ``piw decide``. No script, no
external resource: the page works on any phone browser, and its ``Content-Security-Policy`` forbids scripts.
Everything shown is escaped HTML; the token is the only credential and it answers one gate once.

The routes are in ``piw.channels.page_routes`` (FastAPI, ``piw[serve]``), imported when ``piw serve`` mounts them.
"""

from __future__ import annotations

import html
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs

from piw.channels.message import plain
from piw.errors import AnswerInvalid, AnswerTokenRefused, DecisionResolved, PiwError

MAX_FORM_BYTES = 200_000
HEADERS = {
    "Content-Security-Policy": (
        "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"
    ),
    "X-Frame-Options": "DENY",
    "Cache-Control": "no-store",
    "Referrer-Policy": "no-referrer",
    "X-Content-Type-Options": "nosniff",
}
STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:40rem;margin:1rem auto;padding:0 1rem;line-height:1.4}"
    "pre{white-space:pre-wrap;background:#f4f4f4;padding:.5rem;overflow-wrap:anywhere}"
    "button{font-size:1.1rem;padding:.6rem 1.2rem;margin:.3rem 0}textarea{width:100%;min-height:5rem}"
    "form{border-top:1px solid #ddd;padding:.5rem 0}.digest{color:#666;font-size:.85rem;overflow-wrap:anywhere}"
)


def _e(value: object, limit: int = 20_000) -> str:
    return html.escape(plain(value, limit))


def _document(title: str, body: str) -> str:
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{_e(title, 200)}</title><style>{STYLE}</style></head><body>{body}</body></html>"
    )


def _blocks(blocks: list[Any]) -> str:
    parts = []
    for block in blocks:
        if not isinstance(block, Mapping):
            continue
        if block.get("kind") == "fields":
            rows = "".join(
                f"<dt>{_e(item.get('label'), 100)}</dt><dd>{_e(item.get('value'), 2000)}</dd>"
                for item in block.get("items", [])
                if isinstance(item, Mapping)
            )
            parts.append(f"<dl>{rows}</dl>")
        elif block.get("kind") == "section":
            parts.append(f"<h3>{_e(block.get('title'), 200)}</h3>")
            if block.get("text"):
                parts.append(f"<p>{_e(block.get('text'))}</p>")
            parts.append(_blocks(list(block.get("blocks") or [])))
        elif block.get("kind") == "preformatted":
            parts.append(f"<pre>{_e(block.get('text'), 100_000)}</pre>")
    return "".join(parts)


def request_page(opened: Mapping[str, Any], run_id: str, only: str | None, error: str | None = None) -> str:
    """The page of an open gate: its request, digest and one form per choice (``only``: that choice's)."""
    request = opened.get("request") if isinstance(opened.get("request"), Mapping) else {}
    assert isinstance(request, Mapping)
    title = str(request.get("title") or "Decision")
    body = [f"<h1>{_e(title, 2000)}</h1>"]
    if request.get("subject"):
        body.append(f"<p><strong>{_e(request.get('subject'), 2000)}</strong></p>")
    if request.get("summary"):
        body.append(f"<p>{_e(request.get('summary'))}</p>")
    body.append(_blocks(list(request.get("blocks") or [])))
    body.append(
        f'<p class="digest">For {_e(opened.get("audience"), 200)} · run {_e(run_id, 200)} · '
        f"request <code>{_e(opened.get('requestSha256'), 100)}</code></p>"
    )
    if error:
        body.append(f'<p role="alert"><strong>{_e(error, 500)}</strong></p>')
    for item in opened.get("choices", []):
        if not isinstance(item, Mapping) or (only is not None and item.get("id") != only):
            continue
        fields = []
        for field in item.get("inputs", []) or []:
            if isinstance(field, Mapping):
                name = _e(field.get("name"), 64)
                fields.append(
                    f"<label>{_e(field.get('prompt'), 500)}<br>"
                    f'<textarea name="text.{name}" maxlength="{int(field.get("maxLength") or 4000)}"'
                    f"{' required' if field.get('required', True) else ''}></textarea></label><br>"
                )
        body.append(
            f'<form method="post">{"".join(fields)}<button type="submit" name="choice" '
            f'value="{_e(item.get("id"), 64)}">{_e(item.get("label") or item.get("id"), 200)}</button></form>'
        )
    return _document(title, "".join(body))


def message_page(title: str, text: str) -> str:
    return _document(title, f"<h1>{_e(title, 200)}</h1><p>{_e(text, 2000)}</p>")


def parse_form(body: bytes) -> tuple[str | None, dict[str, str]]:
    """The posted choice and texts (``text.NAME`` fields) of an answer form."""
    if len(body) > MAX_FORM_BYTES:
        raise AnswerInvalid("The answer is too long.")
    fields = parse_qs(body.decode("utf-8", errors="replace"), keep_blank_values=True)
    choice = fields.get("choice", [None])[0]
    texts = {key[5:]: values[0] for key, values in fields.items() if key.startswith("text.") and values}
    return choice, texts


def show(home: Path, token: str) -> tuple[int, str]:
    """``GET``: the page for ``token`` (200), or why it cannot answer (410)."""
    from piw.channels.answer import token_wait
    from piw.store.db.channels import open_channel_store
    from piw.store.db.run_database import open_run_database

    try:
        row = token_wait(home, open_channel_store(home), token)
        decision = open_run_database(home).decisions.get_decision(row.decision_id)
    except AnswerTokenRefused as exc:
        return 410, message_page("Nothing to answer", str(exc))
    assert decision is not None
    return 200, request_page(decision.request, row.run_id, row.choice)


def answer(home: Path, token: str, body: bytes, client: str) -> tuple[int, str]:
    """``POST``: record the posted answer; the page that says what happened, with its HTTP status."""
    from piw.channels.answer import answer_with_token
    from piw.store.db.channels import open_channel_store

    store = open_channel_store(home)
    row = store.get_token(token)
    who = f"{row.channel if row else '?'} answer page ({client})"
    try:
        choice, texts = parse_form(body)
        receipt = answer_with_token(home, token, choice, texts, who, store=store)
    except AnswerTokenRefused as exc:
        return 410, message_page("Nothing to answer", str(exc))
    except DecisionResolved as exc:
        return 409, message_page("Already decided", str(exc))
    except AnswerInvalid as exc:
        status, page = show(home, token)
        if status != 200:
            return status, page
        from piw.store.db.run_database import open_run_database

        found = store.get_token(token)
        decision = open_run_database(home).decisions.get_decision(found.decision_id) if found else None
        if decision is None:
            return 400, message_page("Not recorded", str(exc))
        return 400, request_page(decision.request, decision.run_id, found.choice if found else None, str(exc))
    except PiwError as exc:
        return 503, message_page("Not recorded", f"{exc} Try again.")
    picked = receipt.spec.answer.get("choice") if isinstance(receipt.spec.answer, dict) else None
    return 200, message_page(
        "Answer recorded", f"Recorded {picked}. The run continues as run {receipt.continuation_run_id}."
    )
