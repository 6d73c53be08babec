"""Rebuilds: a new generation of a RAG fills beside the live one and replaces it in one step."""
