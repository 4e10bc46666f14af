"""The settings of ``$PIW_HOME/config.toml``: one model per table, and :class:`~piw.config.settings.PiwConfig`
that reads them all (``docs/providers.md``, "1. `$PIW_HOME/config.toml`").

Every feature's table lives here, below the features that use it, so reading the config never imports a feature.
"""
