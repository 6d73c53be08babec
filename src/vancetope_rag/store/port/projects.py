"""The store port of projects: registration, status and the node a project runs on.
Re-exported by :mod:`.port`."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from vancetope_rag.domain.records import Project, ProjectStatus


@runtime_checkable
class ProjectStore(Protocol):
    """Projects of every tenant, with their status and home node."""

    def upsert_project(
        self, tenant_id: str, project_id: str, *, status: ProjectStatus, home_node: str | None
    ) -> Project: ...

    def get_project(self, tenant_id: str, project_id: str) -> Project | None: ...

    def list_projects(
        self, *, status: ProjectStatus | None = None, tenant_id: str | None = None
    ) -> list[Project]: ...

    def projects_for_node(self, node_id: str) -> list[Project]:
        """RUNNING projects whose home node is ``node_id`` plus RUNNING ones with no node."""
        ...
