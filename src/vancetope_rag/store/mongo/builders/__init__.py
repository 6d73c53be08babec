"""Pure builders of the MongoDB store: filters, pipelines, update documents and codecs, tested
without a database."""
