"""The store port of the RAG catalog: the generations of each RAG name (live, shadow, retired).

Readers see live generations only (:class:`CatalogStore`'s ``get``/``find``/``list``); a name
is unique among the live RAGs of a project. The reads and writes of every generation
(:class:`RagGenerations`) are what a rebuild needs, so the rebuild port
(:class:`~.rebuilds.RebuildStore`) has them too. Re-exported by :mod:`.port`.
"""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from vancetope_rag.domain.records import RagRecord
from vancetope_rag.domain.retrieval.calibration import Calibration


@runtime_checkable
class RagGenerations(Protocol):
    """Every generation of the catalog, whatever its state."""

    def insert_generation(self, rag: RagRecord) -> RagRecord:
        """Store a SHADOW generation (invisible to the live reads of :class:`CatalogStore`)."""
        ...

    def get_any_rag(self, tenant_id: str, project_id: str, rag_id: str) -> RagRecord | None:
        """A catalog entry of any state."""
        ...

    def rag_generations(
        self, tenant_id: str, project_id: str, name: str | None = None
    ) -> list[RagRecord]:
        """Every catalog entry of the project (of one name), any state, oldest first."""
        ...


class GenerationsOfCatalog:
    """:class:`RagGenerations` of a store that keeps the RAG catalog beside it, in
    ``self.catalog``: every call passed on (the rebuild stores, MongoDB's control store)."""

    catalog: RagGenerations

    def insert_generation(self, rag: RagRecord) -> RagRecord:
        return self.catalog.insert_generation(rag)

    def get_any_rag(self, tenant_id: str, project_id: str, rag_id: str) -> RagRecord | None:
        return self.catalog.get_any_rag(tenant_id, project_id, rag_id)

    def rag_generations(
        self, tenant_id: str, project_id: str, name: str | None = None
    ) -> list[RagRecord]:
        return self.catalog.rag_generations(tenant_id, project_id, name)


@runtime_checkable
class CatalogStore(RagGenerations, Protocol):
    """The RAG catalog: live RAGs for readers, plus every generation (:class:`RagGenerations`)."""

    def insert_rag(self, rag: RagRecord) -> RagRecord:
        """Create a live RAG; raises ``RagAlreadyExistsError`` when the name is taken."""
        ...

    def get_rag(self, tenant_id: str, project_id: str, rag_id: str) -> RagRecord | None:
        """The RAG with that id if it is the live generation of its name, else None."""
        ...

    def find_rag(self, tenant_id: str, project_id: str, name: str) -> RagRecord | None:
        """The live RAG of that name."""
        ...

    def list_rags(self, tenant_id: str, project_id: str) -> list[RagRecord]:
        """The live RAGs of the project, by name."""
        ...

    def delete_rag(self, tenant_id: str, project_id: str, rag_id: str) -> bool:
        """Delete a catalog entry of any state (its chunks are the caller's business)."""
        ...

    def set_rag_calibration(
        self, tenant_id: str, project_id: str, rag_id: str, calibration: Calibration
    ) -> bool:
        """Store the RAG's ``minScore: auto`` calibration (any state: a rebuild calibrates its
        new generation before the switch); False when no such RAG is left."""
        ...

    def rag_dimensions(self) -> set[int]:
        """Every embedding dimension of the RAG catalog (every state), across tenants (for
        ``init``: a rebuild's shadow needs its dimension's indexes too)."""
        ...
