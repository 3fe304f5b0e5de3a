"""The error tree's helpers: exception-group unwrapping and ``Type: message`` descriptions."""

from __future__ import annotations

from memoryd.errors import (
    DaemonTimeout,
    InvalidParams,
    MemorydError,
    WatcherUnavailable,
    describe_error,
    leaf_errors,
    only_error,
)


def test_leaf_errors_flattens_nested_groups_in_order() -> None:
    a, b, c = ValueError("a"), KeyError("b"), InvalidParams("c")
    assert leaf_errors(a) == [a]
    assert leaf_errors(ExceptionGroup("g", [a, ExceptionGroup("h", [b, c])])) == [a, b, c]


def test_only_error_is_the_single_memoryd_error_or_none() -> None:
    error = WatcherUnavailable("no watch")
    assert only_error(error) is error
    assert only_error(ExceptionGroup("a", [ExceptionGroup("b", [error])])) is error
    assert only_error(ExceptionGroup("a", [error, error])) is None
    assert only_error(ValueError("not ours")) is None


def test_describe_error_is_type_and_message() -> None:
    assert describe_error(ValueError("bad value")) == "ValueError: bad value"
    assert describe_error(TimeoutError()) == "TimeoutError"
    group = ExceptionGroup("g", [ValueError("x"), ExceptionGroup("h", [KeyError("k")])])
    assert describe_error(group) == "ValueError: x; KeyError: 'k'"


def test_the_client_timeout_is_in_the_tree_and_a_timeout_error() -> None:
    error = DaemonTimeout("memoryd did not answer within 1 s", timeout=1.0)
    assert isinstance(error, MemorydError) and isinstance(error, TimeoutError)
    assert error.to_dict() == {"code": "daemon_timeout", "timeout": 1.0}
    assert str(error) == "memoryd did not answer within 1 s"
