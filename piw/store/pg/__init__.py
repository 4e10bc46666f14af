"""PostgreSQL mode: one database that hosts on many machines share for the queue, the claims and the trace
(``docs/many-machines.md``).

Nothing here is imported unless a database is configured (``piw.store.pg.setting`` decides, cheaply); SQLite mode
(``piw.store.db``) stays the default and does not change.
"""
