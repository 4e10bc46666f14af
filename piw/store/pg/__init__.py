"""Database mode: PostgreSQL shared by many hosts (``docs/many-machines.md``)."""
