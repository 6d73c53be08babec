"""The recipes shipped with the package, loaded by name: ``load_recipe("docs-assistant")``
(see :mod:`vancetope_rag.recipes`). Only YAML files live here."""
