"""The cascade settings: their registry, their kinds, AutoInject's ON/OFF/AUTO resolution and
the settings of extraction (pure)."""
