"""The JSON-RPC message shapes: what each kind of line decodes to, and encode/decode properties."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from memoryd.core.protocol import (
    INTERNAL_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    SERVER_ERROR,
    Batch,
    ErrorReply,
    Request,
    decode_line,
    decode_response,
    encode_batch,
    encode_error,
    encode_request,
    encode_result,
    error_reply,
)
from memoryd.errors import ConfigError, InvalidParams, MethodNotFound, PathOutsideMemory

json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text()
)
json_values = st.recursive(
    json_scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
json_objects = st.dictionaries(st.text(), json_values, max_size=5)
request_ids = st.integers(min_value=-(2**63), max_value=2**63) | st.text()
# Lone surrogates (a client's "\ud800" escape) must survive too; they are not valid UTF-8.
# (Kept apart: two adjacent ones would be a surrogate pair, which JSON reads as one character.)
surrogate_text = st.lists(
    st.characters(min_codepoint=0xD800, max_codepoint=0xDFFF), min_size=1, max_size=5
).map("x".join)


def _error(line: bytes) -> ErrorReply:
    decoded = decode_line(line)
    assert isinstance(decoded, ErrorReply), decoded
    return decoded


# --- decoding requests -----------------------------------------------------------------


def test_a_request_decodes_to_method_params_and_id() -> None:
    line = b'{"jsonrpc":"2.0","id":7,"method":"memory.search","params":{"query":"sqlite"}}'
    assert decode_line(line) == Request("memory.search", {"query": "sqlite"}, 7)


def test_params_may_be_absent_and_ids_may_be_strings_or_null() -> None:
    assert decode_line(b'{"jsonrpc":"2.0","id":"a","method":"daemon.ping"}') == Request(
        "daemon.ping", {}, "a"
    )
    assert decode_line(b'{"jsonrpc":"2.0","id":null,"method":"m"}') == Request("m", {}, None)


def test_a_message_without_id_is_a_notification() -> None:
    decoded = decode_line(b'{"jsonrpc":"2.0","method":"session.append","params":{}}')
    assert isinstance(decoded, Request)
    assert decoded.notification


def test_blank_lines_are_ignored() -> None:
    assert decode_line(b"") is None
    assert decode_line(b"  \r") is None


@pytest.mark.parametrize(
    "line",
    [b"{", b"not json", b'{"a":1}}', b"\xef\xbb\xbf{}", b"[NaN]", b'{"x": Infinity}'],
    ids=["unterminated", "words", "trailing", "bom", "nan", "infinity"],
)
def test_malformed_json_is_a_parse_error(line: bytes) -> None:
    reply = _error(line)
    assert (reply.code, reply.id) == (PARSE_ERROR, None)


def test_invalid_utf8_is_a_parse_error() -> None:
    reply = _error(b'{"jsonrpc":"2.0","id":1,"method":"\xff"}')
    assert reply.code == PARSE_ERROR
    assert "UTF-8" in reply.message


def test_nesting_too_deep_for_the_parser_is_a_parse_error() -> None:
    assert _error(b"[" * 200_000 + b"]" * 200_000).code == PARSE_ERROR


@pytest.mark.parametrize(
    "line",
    [b"[]", b"3", b'"text"', b"null", b"true"],
    ids=["empty-batch", "number", "string", "null", "bool"],
)
def test_anything_but_an_object_is_an_invalid_request(line: bytes) -> None:
    reply = _error(line)
    assert (reply.code, reply.id) == (INVALID_REQUEST, None)


@pytest.mark.parametrize(
    ("message", "expected_id"),
    [
        ({"id": 1, "method": "m"}, 1),
        ({"jsonrpc": "1.0", "id": 1, "method": "m"}, 1),
        ({"jsonrpc": "2.0", "id": 2}, 2),
        ({"jsonrpc": "2.0", "id": 3, "method": 5}, 3),
        ({"jsonrpc": "2.0", "id": 1.5, "method": "m"}, None),
        ({"jsonrpc": "2.0", "id": True, "method": "m"}, None),
        ({"jsonrpc": "2.0", "id": [1], "method": "m"}, None),
        ({"jsonrpc": "2.0", "id": {}, "method": "m"}, None),
    ],
    ids=[
        "no-jsonrpc",
        "jsonrpc-1.0",
        "no-method",
        "method-not-string",
        "float-id",
        "bool-id",
        "array-id",
        "object-id",
    ],
)
def test_bad_request_objects_are_invalid_requests(message: Any, expected_id: Any) -> None:
    reply = _error(json.dumps(message).encode())
    assert (reply.code, reply.id) == (INVALID_REQUEST, expected_id)


@pytest.mark.parametrize("params", [[1, 2], "x", 3, None], ids=["array", "string", "int", "null"])
def test_params_that_are_not_an_object_are_invalid_params(params: Any) -> None:
    line = json.dumps({"jsonrpc": "2.0", "id": 4, "method": "m", "params": params}).encode()
    reply = _error(line)
    assert (reply.code, reply.id) == (INVALID_PARAMS, 4)


def test_a_notification_with_bad_params_gets_no_reply() -> None:
    assert decode_line(b'{"jsonrpc":"2.0","method":"m","params":[1]}') is None


# --- encoding replies ------------------------------------------------------------------


def test_replies_are_one_compact_line() -> None:
    line = encode_result(1, {"ok": True})
    assert line == b'{"jsonrpc":"2.0","id":1,"result":{"ok":true}}\n'


def test_error_replies_always_carry_a_memoryd_code() -> None:
    parsed = json.loads(encode_error(None, PARSE_ERROR, "parse error: x"))
    assert parsed["error"] == {
        "code": PARSE_ERROR,
        "message": "parse error: x",
        "data": {"code": "parse_error"},
    }
    data = json.loads(encode_error(3, INVALID_REQUEST, "big", {"code": "request_too_large"}))
    assert data["error"]["data"]["code"] == "request_too_large"
    assert json.loads(encode_error(3, INTERNAL_ERROR, "boom"))["error"]["data"] == {
        "code": "internal_error"
    }


def test_error_data_json_cannot_hold_is_dropped_not_fatal() -> None:
    line = encode_error(1, SERVER_ERROR, "x", {"code": "busy", "thing": object()})
    assert json.loads(line)["error"]["data"] == {"code": "busy"}


def test_results_json_cannot_hold_raise() -> None:
    with pytest.raises(TypeError):
        encode_result(1, object())
    with pytest.raises(ValueError, match="JSON"):
        encode_result(1, float("nan"))


def test_memoryd_errors_map_to_jsonrpc_codes() -> None:
    bad = error_reply(5, InvalidParams("parameter 'query' must be a string", param="query"))
    assert (bad.code, bad.data) == (INVALID_PARAMS, {"code": "invalid_params", "param": "query"})
    assert error_reply(5, MethodNotFound("unknown method 'x'")).code == METHOD_NOT_FOUND
    outside = error_reply(6, PathOutsideMemory("path escapes the memory root"))
    assert (outside.id, outside.code, outside.message) == (
        6,
        SERVER_ERROR,
        "path escapes the memory root",
    )
    assert outside.data == {"code": "path_outside_memory"}
    assert error_reply(1, ConfigError("bad", key="search.min_score")).data == {
        "code": "config_invalid",
        "key": "search.min_score",
    }


# --- decoding replies (client side) ----------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        b"{}",
        b"[]",
        b'{"jsonrpc":"2.0","id":1}',
        b'{"jsonrpc":"2.0","id":1.5,"result":1}',
        b'{"jsonrpc":"2.0","id":1,"error":{"code":"x","message":"m"}}',
        b"\xff",
        b"{",
    ],
)
def test_malformed_replies_raise_value_error(line: bytes) -> None:
    with pytest.raises(ValueError, match=r"reply|Expecting|JSON"):
        decode_response(line)


# --- properties ------------------------------------------------------------------------


@given(request_ids, st.text(), json_objects)
def test_requests_round_trip(request_id: int | str, method: str, params: dict[str, Any]) -> None:
    line = encode_request(request_id, method, params)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
    assert decode_line(line[:-1]) == Request(method, params, request_id)


@given(request_ids | st.none(), json_values)
def test_results_round_trip(request_id: int | str | None, result: Any) -> None:
    line = encode_result(request_id, result)
    assert line.count(b"\n") == 1
    response = decode_response(line[:-1])
    assert (response.id, response.result, response.error) == (request_id, result, None)


@given(request_ids | st.none(), st.integers(-33000, -32000), st.text(), json_objects)
def test_errors_round_trip(
    request_id: int | str | None, code: int, message: str, data: dict[str, Any]
) -> None:
    response = decode_response(encode_error(request_id, code, message, data)[:-1])
    assert response.error is not None
    assert (response.id, response.error.code, response.error.message) == (request_id, code, message)
    assert {k: v for k, v in response.error.data.items() if k != "code"} == {
        k: v for k, v in data.items() if k != "code"
    }
    assert isinstance(response.error.data["code"], str)


@given(surrogate_text, surrogate_text)
def test_lone_surrogates_round_trip_as_valid_utf8(method: str, value: str) -> None:
    line = encode_request(1, method, {"v": value})
    line.decode("utf-8")  # valid UTF-8 on the wire
    assert decode_line(line[:-1]) == Request(method, {"v": value}, 1)
    result = encode_result(1, value)
    assert decode_response(result[:-1]).result == value


@given(st.binary(max_size=2000))
def test_decode_line_never_raises_on_arbitrary_bytes(line: bytes) -> None:
    decoded = decode_line(line)
    assert decoded is None or isinstance(decoded, Request | ErrorReply)
    if isinstance(decoded, ErrorReply):
        decoded.encode().decode("utf-8")


@given(json_values)
def test_decode_line_never_raises_on_arbitrary_json(value: Any) -> None:
    decoded = decode_line(json.dumps(value).encode())
    assert isinstance(decoded, Request | ErrorReply | Batch) or decoded is None
    if isinstance(value, dict) and isinstance(decoded, Request):
        assert decoded.method == value["method"]


def test_a_batch_decodes_to_its_members_each_checked_on_its_own() -> None:
    line = json.dumps(
        [
            {"jsonrpc": "2.0", "id": 1, "method": "m", "params": {"a": 1}},
            {"jsonrpc": "2.0", "method": "note"},
            {"jsonrpc": "2.0", "id": 2},
            [],
            {"jsonrpc": "2.0", "method": "note", "params": 5},  # a bad notification: dropped
        ]
    ).encode()
    batch = decode_line(line)
    assert isinstance(batch, Batch)
    first, note, bad, nested = batch.members
    assert first == Request("m", {"a": 1}, 1)
    assert isinstance(note, Request) and note.notification
    assert isinstance(bad, ErrorReply) and (bad.id, bad.code) == (2, INVALID_REQUEST)
    assert isinstance(nested, ErrorReply) and nested.code == INVALID_REQUEST


def test_a_batch_over_the_limit_is_refused_whole() -> None:
    reply = decode_line(json.dumps([{"jsonrpc": "2.0", "id": 1, "method": "m"}] * 65).encode())
    assert isinstance(reply, ErrorReply) and reply.code == INVALID_REQUEST
    assert reply.data == {"max_batch": 64}


def test_batch_replies_are_one_json_array_line() -> None:
    one, two = encode_result(1, "a"), encode_error(2, INVALID_PARAMS, "bad")
    line = encode_batch([one, two])
    assert line.endswith(b"]\n") and line.count(b"\n") == 1
    assert json.loads(line) == [json.loads(one), json.loads(two)]
    assert encode_batch([]) == b""


def test_error_data_values_are_plain_json_never_a_repr() -> None:
    from pathlib import Path

    error = PathOutsideMemory(
        "refused", path=Path("/a/b"), parts=("x", 1), nested={"p": Path("/c")}
    )
    data = error_reply(1, error).data
    assert data == {
        "code": "path_outside_memory",
        "path": "/a/b",
        "parts": ["x", 1],
        "nested": {"p": "/c"},
    }
