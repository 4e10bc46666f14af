"""Channels: a waiting gate announced where a person is, and answered from there (``docs/channels.md``)."""
