"""Every store pins a RAG's model profile with it: written on insert and on a
rebuild's new generation, read back as written, and absent (None) for a RAG created without
one, which the services treat as created before profiles; lookups stay scoped by tenant."""

from __future__ import annotations

from dataclasses import replace

import pytest

from vancetope_rag.domain.records import RagRecord, RagState
from vancetope_rag.model_profiles import known_profile, profile_from_json, profile_to_json
from vancetope_rag.store.port import ControlStore, Store

T, P = "tenant-p", "proj-p"


def rag(rag_id: str, *, tenant: str = T, profile: str | None = None) -> RagRecord:
    return RagRecord(
        rag_id, tenant, P, "_documents", "openai", "multilingual-e5-small", 8, 200, 20,
        embedding_profile=profile,
    )  # fmt: skip


@pytest.fixture
def control(store: Store) -> ControlStore:
    return store.control


E5 = known_profile("multilingual-e5-small")
assert E5 is not None
PINNED = profile_to_json(E5)


def test_the_pinned_profile_is_read_back_as_written(control: ControlStore) -> None:
    control.insert_rag(rag("with-profile", profile=PINNED))
    found = control.get_rag(T, P, "with-profile")
    assert found is not None and found.embedding_profile == PINNED
    assert profile_from_json(found.embedding_profile) == E5
    listed = control.list_rags(T, P)
    assert [r.embedding_profile for r in listed] == [PINNED]
    assert control.get_rag("other-tenant", P, "with-profile") is None


def test_a_rag_without_a_profile_reads_back_none(control: ControlStore) -> None:
    control.insert_rag(rag("before-profiles"))
    found = control.get_rag(T, P, "before-profiles")
    assert found is not None and found.embedding_profile is None


def test_a_new_generation_pins_its_own_profile(store: Store) -> None:
    live = store.control.insert_rag(rag("gen-1"))
    shadow = replace(
        rag("gen-2", profile=PINNED), generation=2, replaces=live.id, state=RagState.SHADOW
    )
    store.control.insert_generation(shadow)
    found = store.control.get_any_rag(T, P, "gen-2")
    assert found is not None and found.embedding_profile == PINNED
    again = store.control.get_rag(T, P, "gen-1")
    assert again is not None and again.embedding_profile is None
