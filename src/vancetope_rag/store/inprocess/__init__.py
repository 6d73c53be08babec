"""The in-process indexes, engine-neutral: fed by any store, importing none (vector cache,
int8 rows and scan kernels, BM25, the epoch cache they share, the background worker)."""
