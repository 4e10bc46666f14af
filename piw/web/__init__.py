"""Rules for piw's web servers that no web framework owns.

    guard     the token, ``Host`` and ``Origin`` checks and the session cap (``docs/guarantees.md``, "Security")

``piw view --serve`` applies them to textual-serve's aiohttp app (``piw.app.serve``). Nothing here imports a web
framework or Textual, so another server can apply the same rules as they are.
"""
