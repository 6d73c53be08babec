"""Retrieval rules: modes, fusion and hit selection, the relevance cut, ``minScore: auto``
calibration, metadata filters (pure)."""
