"""Retrieval: a RAG's hits for a query (dense or hybrid) and the one retriever every surface
uses."""
