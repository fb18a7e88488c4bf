"""A job's output: what its handler returned, kept with the job's completed record for the
dedup window (`oncely jobs show`). Pure: unit-tested without a database."""

from __future__ import annotations

import json
import re

from ._errors import PermanentError

MAX_OUTPUT_BYTES = 65536  # of JSON text: the schema's limit (output_refusal())
_ESCAPED_NUL = re.compile(r"(?<!\\)(?:\\\\)*\\u0000")  # \u0000 after an odd run of backslashes


def output_text(value: object) -> str | None:
    """The JSON text kept for a handler's return value (None: no output). Raises
    PermanentError, which fails the job permanently, for a value that is not JSON or is
    larger than 64 KiB."""
    if value is None:
        return None
    try:
        text = json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    except (TypeError, ValueError) as e:
        raise PermanentError(f"the handler returned {type(value).__name__}, which is not JSON ({e}); return None "
                             "or a JSON value: it is the job's output") from None
    if _ESCAPED_NUL.search(text):
        raise PermanentError("output holds a \\u0000 character, which Postgres jsonb cannot store")
    size = len(text.encode())
    if size > MAX_OUTPUT_BYTES:
        raise PermanentError(f"output is {size} bytes of JSON, over the limit of {MAX_OUTPUT_BYTES} (64 KiB)")
    return text
