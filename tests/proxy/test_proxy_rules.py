"""The proxy's pure rules, without a server: what feeds retrieval, where the block goes, the
opt-out, the key table and the configuration's checks."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from vancetope_rag.cli import cli
from vancetope_rag.errors import ApiConfigError, InvalidInputError
from vancetope_rag.proxy import ProxyConfig, hash_key
from vancetope_rag.proxy.keys import KeyFile, load_key_table, parse_key_table
from vancetope_rag.proxy.messages import (
    MAX_JSON_DEPTH,
    check_chat_body,
    insert_blocks,
    model_path,
    opted_out,
    parse_json,
    text_of,
    user_turn,
)
from vancetope_rag.proxy.upstream import Scrubber
from vancetope_rag.secrets import MASK

BLOCK = "<rag-context>\nexcerpts\n</rag-context>"


def test_the_trailing_user_turn_feeds_retrieval_text_parts_only() -> None:
    messages = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "old question"},
        {"role": "assistant", "content": "old answer"},
        {"role": "user", "content": "first part"},
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "text", "text": "second part"},
            ],
        },
        {"role": "assistant", "tool_calls": [{"id": "c", "type": "function"}], "content": None},
        {"role": "tool", "tool_call_id": "c", "content": "tool output is not the question"},
    ]
    assert user_turn(messages) == ["first part", "second part"]
    assert user_turn([{"role": "system", "content": "only"}]) == []
    assert text_of([{"type": "input_audio"}]) is None


def test_blocks_go_after_system_and_developer_messages() -> None:
    messages = [
        {"role": "developer", "content": "dev"},
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "q"},
    ]
    out = insert_blocks(messages, [BLOCK, "  "], "separate")
    assert [m["role"] for m in out] == ["developer", "system", "system", "user"]
    assert out[2] == {"role": "system", "content": BLOCK}
    assert messages[2] == {"role": "user", "content": "q"}  # the input is not modified
    assert insert_blocks([{"role": "user", "content": "q"}], [BLOCK], "separate")[0] == {
        "role": "system",
        "content": BLOCK,
    }


def test_merge_appends_to_the_last_system_message_or_starts_one() -> None:
    parts = [{"type": "text", "text": "sys"}]
    out = insert_blocks(
        [{"role": "system", "content": parts}, {"role": "user", "content": "q"}], [BLOCK], "merge"
    )
    assert out[0]["content"] == [*parts, {"type": "text", "text": BLOCK}] and len(out) == 2
    out = insert_blocks([{"role": "user", "content": "q"}], [BLOCK, "more"], "merge")
    assert out[0] == {"role": "system", "content": f"{BLOCK}\n\nmore"}


def test_opting_out_accepts_off_only() -> None:
    assert not opted_out({}, {})
    assert opted_out({"x-vancetope-rag-inject": "OFF"}, {})
    assert opted_out({}, {"vancetope_rag": {"inject": False}})
    for headers, body in (
        ({"x-vancetope-rag-inject": "on"}, {}),
        ({}, {"vancetope_rag": {"inject": "ON"}}),
        ({}, {"vancetope_rag": {"tenant": "t2"}}),
        ({}, {"vancetope_rag": "off"}),
    ):
        with pytest.raises(InvalidInputError):
            opted_out(headers, body)


def test_chat_bodies_are_checked_for_what_the_proxy_reads() -> None:
    for body in ([], {"messages": []}, {"messages": "hi"}, {"messages": [{"content": "x"}]}):
        with pytest.raises(InvalidInputError):
            check_chat_body(body)


def _entry(**more: object) -> dict[str, object]:
    return {"name": "k", "hash": hash_key("vrk_x"), "tenant": "t1", "projects": ["p"], **more}


def test_the_key_table_keeps_hashes_and_refuses_bad_entries(tmp_path: Path) -> None:
    table = parse_key_table({"keys": [_entry()]}, source="keys.yaml", base_dir=tmp_path)
    assert set(table) == {hash_key("vrk_x")} and table[hash_key("vrk_x")].allows("p")
    bad = [
        ({"hash": "vrk_x"}, "'hash' must be"),  # the key itself instead of its hash
        ({"tenant": "a/b"}, "tenant"),
        ({"projects": []}, "'projects'"),
        ({"requestsPerMinute": -1}, "requestsPerMinute"),
        ({"recipe": "missing.yaml"}, "recipe file not found"),
        ({"tenants": ["t2"]}, "unknown field"),
    ]
    for more, message in bad:
        with pytest.raises(ApiConfigError, match=message):
            parse_key_table({"keys": [_entry(**more)]}, source="keys.yaml", base_dir=tmp_path)
    with pytest.raises(ApiConfigError, match="twice"):
        parse_key_table(
            {"keys": [_entry(), _entry(name="other")]}, source="keys.yaml", base_dir=tmp_path
        )
    with pytest.raises(ApiConfigError, match="proxy key file not found"):
        load_key_table(tmp_path / "none.yaml")


def test_a_changed_key_file_is_read_again_and_a_broken_one_admits_no_key(
    tmp_path: Path,
) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump({"keys": [_entry()]}), encoding="utf-8")
    reloads: list[bool] = []
    keys = KeyFile(path, reloads.append)
    assert keys.find("vrk_x") is not None and keys.find("vrk_y") is None
    path.write_text(yaml.safe_dump({"keys": [_entry(hash=hash_key("vrk_y"))]}), encoding="utf-8")
    assert keys.find("vrk_x") is None and keys.find("vrk_y") is not None  # revoked, added
    path.write_text("keys: [{name: broken", encoding="utf-8")
    assert keys.find("vrk_y") is None and keys.failure is not None  # fails closed
    path.write_text(yaml.safe_dump({"keys": [_entry(hash=hash_key("vrk_y"))]}), encoding="utf-8")
    assert keys.find("vrk_y") is not None and keys.failure is None
    assert reloads == [True, False, True]


def test_a_key_file_that_is_not_utf8_admits_no_key_and_says_why(tmp_path: Path) -> None:
    path = tmp_path / "keys.yaml"
    path.write_text(yaml.safe_dump({"keys": [_entry()]}), encoding="utf-8")
    keys = KeyFile(path)
    path.write_bytes(b"keys: [{name: \xff\xfe}]\n")
    assert keys.find("vrk_x") is None  # fails closed, not with a UnicodeDecodeError
    assert keys.failure is not None and "cannot read" in keys.failure
    with pytest.raises(ApiConfigError, match="cannot read proxy key file"):
        load_key_table(path)


def test_the_upstream_url_is_checked() -> None:
    assert ProxyConfig(upstream="http://localhost:11434/v1/").upstream == (
        "http://localhost:11434/v1"
    )
    for url in ("localhost:11434", "ftp://host/v1", "https://user:secret@api.example/v1"):
        with pytest.raises(ValueError, match="upstream"):
            ProxyConfig(upstream=url)


def test_proxy_key_prints_the_key_and_an_entry_with_its_hash_only() -> None:
    run = CliRunner().invoke(
        cli,
        ["--tenant", "acme", "proxy-key", "--name", "webui", "--project", "handbook"],
    )
    assert run.exit_code == 0, run.output
    key = run.stdout.strip()
    assert key.startswith("vrk_") and len(key) > 40
    entry = yaml.safe_load(run.stderr.split("\n", 1)[1])[0]
    assert entry == {
        "name": "webui",
        "hash": hash_key(key),
        "tenant": "acme",
        "projects": ["handbook"],
    }
    assert key not in run.stderr


SECRETS = ("upstream-key-7f3a9c1e55", "vrk_caller-key-1234")


@given(
    parts=st.lists(
        st.sampled_from([*SECRETS, "data: ", "\n\n", "upstream-", "vrk_", "x", "{}"]),
        max_size=12,
    ),
    cuts=st.lists(st.integers(0, 400), max_size=8),
)
def test_a_stream_is_scrubbed_wherever_its_chunks_are_cut(
    parts: list[str], cuts: list[int]
) -> None:
    body = "".join(parts).encode()
    scrubber = Scrubber(SECRETS)
    out, at = b"", 0
    for cut in [*sorted({min(c, len(body)) for c in cuts}), len(body)]:
        out += scrubber.feed(body[at:cut])
        at = cut
    out += scrubber.end()
    expected = "".join(parts)
    for secret in SECRETS:
        expected = expected.replace(secret, MASK)
    assert out == expected.encode()


def test_a_scrubber_holds_back_only_what_could_start_a_secret() -> None:
    scrubber = Scrubber(SECRETS)
    assert scrubber.feed(b"data: hello\n\n") == b"data: hello\n\n"  # nothing waits
    assert scrubber.feed(b"data: upstream-ke") == b"data: "
    assert scrubber.feed(b"y-7f3a9c1e55\n\n") == MASK.encode() + b"\n\n"


def test_model_ids_are_checked_segment_by_segment() -> None:
    assert model_path("meta-llama%2FLlama-3.1-8B-Instruct") == (
        "/models/meta-llama/Llama-3.1-8B-Instruct"
    )
    assert model_path("@cf/meta/llama-3-8b") == "/models/@cf/meta/llama-3-8b"
    for bad in ("..", "a/../b", "%2e%2e", "a%2f..", "%252e", "a\\b", "a%5cb", "a%00", "a//b", ""):
        assert model_path(bad) is None, bad


def test_json_nested_past_the_limit_is_refused_before_parsing() -> None:
    ok = b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH
    assert parse_json(ok) is not None
    with pytest.raises(InvalidInputError, match=str(MAX_JSON_DEPTH)):
        parse_json(b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1))
    assert parse_json(b'{"text": "' + b"[" * 500 + b'"}') == {"text": "[" * 500}  # in a string
