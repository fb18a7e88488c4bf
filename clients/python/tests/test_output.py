"""A handler's return value as its job's output (output_text()), without a database."""

from __future__ import annotations

import pytest

from oncely import PermanentError
from oncely._output import MAX_OUTPUT_BYTES, output_text


@pytest.mark.parametrize(("value", "text"), [
    (None, None),  # no output
    ({"charge": "ch_1", "cents": 1250}, '{"charge":"ch_1","cents":1250}'),
    ([1, 2.5, True, None], "[1,2.5,true,null]"),
    ("déjà", '"déjà"'),  # as UTF-8, not \\u escapes: the limit counts the bytes stored
    (0, "0"),
    (False, "false"),
    ("\\u0000", '"\\\\u0000"'),  # a backslash and "u0000" is text, not a NUL
])
def test_json_values_are_kept_compact(value: object, text: str | None) -> None:
    assert output_text(value) == text


@pytest.mark.parametrize(("value", "message"), [
    (object(), "the handler returned object, which is not JSON"),
    ({1, 2}, "the handler returned set, which is not JSON"),
    (float("nan"), "the handler returned float, which is not JSON"),
    ("a\x00b", "output holds a \\u0000 character"),
    ("x" * MAX_OUTPUT_BYTES, f"output is {MAX_OUTPUT_BYTES + 2} bytes of JSON, over the limit of 65536 (64 KiB)"),
])
def test_what_cannot_be_kept_fails_the_job_permanently(value: object, message: str) -> None:
    with pytest.raises(PermanentError, match=message.replace("(", r"\(").replace(")", r"\)").replace("\\u", "\\\\u")):
        output_text(value)


def test_the_limit_is_inclusive() -> None:
    at_limit = "x" * (MAX_OUTPUT_BYTES - 2)  # and its two quotes
    assert output_text(at_limit) == f'"{at_limit}"'
