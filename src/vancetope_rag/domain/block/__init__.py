"""The ``<rag-context>`` block: rendering, the names a template may use, lookalike tags and
labels kept out, the token budget, what an ``[S#]`` label names (pure)."""
