"""JSON text of a data file parsed with every failure a DataError naming the file, line and column.

``json.loads`` raises more than JSONDecodeError on hostile input: RecursionError for nesting deeper than the
interpreter's recursion limit (``[`` * 200,000), and a plain ValueError for an integer of more than
``sys.get_int_max_str_digits()`` digits (4,300). Both escaped the readers as a traceback on the Tasks page and a
bare "RecursionError" from ``task check`` (attack a09). The place is found afterwards by one regex pass over the
text, so the error path stays linear too.
"""
from __future__ import annotations

import json
import re
import sys
from typing import Any

from flowcore.tasks.errors import DataError

__all__ = ["loads"]

DEEP = 500  # reported nesting: far deeper than any row needs, below where the decoder gives up (~1,000)
_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|[\[\]{}]')
_DIGITS = (sys.get_int_max_str_digits() or 4300) + 1
_LONG_INT = re.compile(r'"(?:[^"\\\n]|\\.)*"|-?\d{' + str(_DIGITS) + ',}')


def _where(text: str, pos: int, line: int) -> str:
    """'line L, column C' of ``pos``; ``line`` is the line ``text`` starts on."""
    return f"line {line + text.count(chr(10), 0, pos)}, column {pos - (text.rfind(chr(10), 0, pos) + 1) + 1}"


def _deep_at(text: str) -> int:
    """Where nesting first passes DEEP levels (else where it is deepest): strings are skipped, not counted."""
    depth, best, best_at = 0, -1, 0
    for m in _TOKEN.finditer(text):
        c = m.group()
        if c in "[{":
            depth += 1
            if depth > DEEP:
                return m.start()
            if depth > best:
                best, best_at = depth, m.start()
        elif c in "]}":
            depth -= 1
    return best_at


def _long_int_at(text: str) -> int | None:
    return next((m.start() for m in _LONG_INT.finditer(text) if m.group()[0] != '"'), None)


def loads(text: str, name: object, line: int = 1) -> Any:
    """``json.loads(text)``; any failure is a DataError naming ``name``, the line (``text`` starts on ``line``)
    and the column."""
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise DataError(f"{name}: line {line + exc.lineno - 1}, column {exc.colno}: invalid JSON ({exc.msg})") \
            from None
    except RecursionError:
        raise DataError(f"{name}: {_where(text, _deep_at(text), line)}: JSON nested too deeply (more than "
                        f"{DEEP} levels of lists or objects): a row's values cannot be read") from None
    except ValueError:  # an integer past Python's digit limit; the decoder names no place
        at = _long_int_at(text)
        place = _where(text, at, line) if at is not None else f"line {line}"
        raise DataError(f"{name}: {place}: a number of more than {_DIGITS - 1} digits cannot be read: "
                        "write it as a string") from None
