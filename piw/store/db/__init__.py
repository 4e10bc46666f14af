"""The run database: the queue and its claims, decisions, the notification outbox, leases, liveness and the runs index.

Everything here reads or writes rows of ``piw.sqlite`` (``docs/detached.md``, "What the database holds"); what a run
leaves on disk beside it (bundles, the trace, state) lives one level up, in ``piw.store``.
"""
