"""Indexing: the scheduler that claims batches, the indexer that brings their chunks in line
with their documents, and what both need (chunking, sources, claims, progress)."""
