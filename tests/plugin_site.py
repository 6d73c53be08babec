"""An embedding provider installed as a third-party plugin, the way pip would (a module and
a dist-info with an entry point) on a folder of the test's own, for CLI subprocesses.

Importable as ``plugin_site`` from any test module (the root conftest's folder is on
``sys.path``).
"""

from __future__ import annotations

import os
import textwrap
from pathlib import Path

# ``{embedding}`` defines a class ``Embedding`` (a HashingEmbedding, or a subclass of it);
# the provider's model names end in their dimension: ``<name>-64``.
_MODULE = """
from vancetope_rag.default_plugins.hashing import HashingEmbedding
from vancetope_rag.embeddings import LoadedModel
from vancetope_rag.hookspecs import hookimpl

{embedding}

class Provider:
    name = {name!r}

    def default_model(self):
        return {name!r} + "-64"

    def load(self, settings, model):
        dimension = int(model.rsplit("-", 1)[1])
        return LoadedModel(
            provider=self.name,
            model=model,
            dimension=dimension,
            embed_model=Embedding(dimension=dimension),
            max_input_tokens=512,
            tokenizer=lambda text: text.split(),
        )


@hookimpl
def register_embedding_providers(register):
    register(Provider())
"""


def install_provider(root: Path, name: str, embedding: str) -> dict[str, str]:
    """Install provider ``name`` under ``root``; the environment that loads it (only it)."""
    module = f"{name}_provider_plugin"
    root.mkdir(parents=True, exist_ok=True)
    source = _MODULE.format(embedding=textwrap.dedent(embedding), name=name)
    (root / f"{module}.py").write_text(source)
    info = root / f"{module}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[vancetope_rag]\n{name} = {module}\n")
    path = [str(root), *filter(None, [os.environ.get("PYTHONPATH")])]
    return {"PYTHONPATH": os.pathsep.join(path), "VANCETOPE_RAG_PLUGINS": name}
