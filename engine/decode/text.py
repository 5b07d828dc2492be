"""Text rules every JSON decoder shares.

Python's ``json`` accepts the escape ``"\\ud800"`` without its pair, and a surrogate's
own UTF-8 bytes: such a string is not Unicode text (it cannot be encoded as UTF-8; Arrow
refuses it). A record holding one is a bad message, refused where it is parsed, before
any column is built from it.
"""

from __future__ import annotations

import json
import re
from typing import Any

#: A \\uD800-\\uDFFF escape: a surrogate, paired (fine) or lone (not Unicode text).
SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")
#: The reason a record with a lone surrogate is bad.
LONE_SURROGATE = "a string holds a lone UTF-16 surrogate escape (\\ud800-\\udfff), not text"


def lone_surrogate(obj: Any) -> bool:
    """True if a string (or member name) in the parsed ``obj`` holds a lone surrogate."""
    try:
        json.dumps(obj, ensure_ascii=False, default=str).encode("utf-8")
    except UnicodeEncodeError:
        return True
    return False


def holds_lone_surrogate(raw: bytes, obj: Any) -> bool:
    """True if ``obj``, parsed from the JSON text ``raw``, holds a lone surrogate.

    Two spellings reach the parsed value: the escape, and the surrogate's own UTF-8
    bytes (``ED A0 80``: not valid UTF-8, yet ``json.loads`` decodes bytes with
    ``surrogatepass``). The parsed value is only looked at when the text has either."""
    if SURROGATE_ESCAPE.search(raw) is None and b"\xed" not in raw:
        return False
    return lone_surrogate(obj)
