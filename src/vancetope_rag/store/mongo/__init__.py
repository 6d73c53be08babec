"""The MongoDB store (production, Atlas Vector Search and Search): thin I/O classes over the
pure builders of :mod:`.builders`."""
