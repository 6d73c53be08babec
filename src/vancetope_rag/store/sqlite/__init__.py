"""The SQLite + sqlite-vec + FTS5 store (the embedded default): one file, several processes."""
