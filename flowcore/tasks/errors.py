"""The error every data reader raises: its own module so the readers (data, rows, jsontext) share it without
importing each other in a cycle."""
from __future__ import annotations


class DataError(ValueError):
    """A benchmark file or row that cannot be read; the message names the file, line and field."""
