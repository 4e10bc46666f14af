"""``piw serve``: an HTTP API over the run database and bundles (``docs/serve.md``).

FastAPI and uvicorn (the ``piw[serve]`` extra) are imported only here, and only ``piw serve`` imports this
package. :func:`~piw.serve.app.create_app` builds the app; other routers (the answer page of ``piw.channels``)
mount on it with ``app.include_router``.
"""
