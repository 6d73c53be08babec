"""Text extraction: the extractor registry, sections and budgets, the sandboxed worker
processes, the record an import keeps of a file, and the service that runs it for imports and
the tools. Extractors themselves are plugins (:mod:`vancetope_rag.default_plugins.extractors`)."""
