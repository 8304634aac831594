"""A user task's data file: .csv, .jsonl or .json (a list of objects), optionally gzipped, read as a bounded
stream. Every error names the file, the line (or list item) and the field; nothing here raises anything else.

The cap holds after decompression: a small .gz that inflates past it is refused as it is read, never held.
"""
from __future__ import annotations

import csv
import gzip
import io
import json
import re
import zlib
from dataclasses import dataclass
from itertools import chain, repeat
from pathlib import Path
from typing import IO, Any

from flowcore.tasks.data import DataError
from flowcore.tasks.jsontext import loads as _loads

MAX_BYTES = 50 * 1024 * 1024  # an upload or data file, after decompression
MAX_COLUMNS = 1000  # a task uses a few; the cap keeps every per-row step (zip, preview, template) small
FORMATS = (".csv", ".jsonl", ".json")
_CHUNK = 1 << 20


@dataclass
class Table:
    """Rows of a data file: ``rows[i]`` was read at ``lines[i]`` (a JSON list's item number for .json)."""

    name: str
    columns: list[str]
    rows: list[dict[str, Any]]
    lines: list[int]
    unit: str = "line"  # how ``lines`` count: "line" or "item"

    def where(self, i: int) -> str:
        return f"{self.name}: {self.unit} {self.lines[i]}"


def data_format(name: str) -> str:
    """The format of a file name (.csv, .jsonl or .json, after an optional .gz); DataError naming it."""
    low = name.lower()
    low = low[:-3] if low.endswith(".gz") else low
    for fmt in FORMATS:
        if low.endswith(fmt):
            return fmt
    raise DataError(f"{name}: unknown data format: use a .csv, .jsonl or .json file (optionally .gz)")


def _bounded(stream: IO[bytes], name: str, cap: int) -> bytes:
    out = bytearray()
    try:
        while True:
            chunk = stream.read(_CHUNK)
            if not chunk:
                return bytes(out)
            out += chunk
            if len(out) > cap:
                raise DataError(f"{name}: larger than {cap // (1024 * 1024)} MB"
                                f"{' after decompression' if name.lower().endswith('.gz') else ''}: "
                                "use a smaller file (a sample of the rows)")
    except (OSError, EOFError, zlib.error) as exc:  # gzip.BadGzipFile is an OSError
        raise DataError(f"{name}: cannot read ({exc})") from None


def read_bytes(source: str | Path | bytes, name: str | None = None, cap: int = MAX_BYTES) -> bytes:
    """The file's bytes (decompressed for .gz), read in chunks and refused past ``cap``."""
    label = name or (Path(source).name if not isinstance(source, bytes) else "upload")
    raw: IO[bytes]
    if isinstance(source, bytes):
        raw = io.BytesIO(source)
    else:
        try:
            raw = open(source, "rb")  # noqa: SIM115 - closed below
        except FileNotFoundError:
            raise DataError(f"{source}: file not found") from None
        except OSError as exc:
            raise DataError(f"{source}: cannot read ({exc.strerror or exc})") from None
    with raw:
        if label.lower().endswith(".gz"):
            with gzip.GzipFile(fileobj=raw) as gz:
                return _bounded(gz, label, cap)
        return _bounded(raw, label, cap)


def _decode(data: bytes, name: str) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        head = exc.object[:exc.start]
        line = head.count(b"\n") + 1
        col = len(head[head.rfind(b"\n") + 1:].decode("utf-8", "replace")) + 1
        raise DataError(f"{name}: line {line}, column {col}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x}); "
                        "save the file as UTF-8") from None


def _csv(text: str, name: str) -> Table:
    reader = csv.reader(io.StringIO(text, newline=""), strict=True)
    header: list[str] | None = None
    rows, lines = [], []
    start = 1
    try:
        for record in reader:
            line, start = start, reader.line_num + 1
            if not record or all(not c.strip() for c in record):
                continue
            if header is None:
                if len(record) > MAX_COLUMNS:
                    raise DataError(f"{name}: line {line}: the header has {len(record)} columns, more than "
                                    f"{MAX_COLUMNS}: keep only the columns the task uses")
                header = [c.strip() for c in record]
                seen: set[str] = set()  # a set: `col in header[:i]` was quadratic (40,000 columns: 42 s)
                for i, col in enumerate(header):
                    if not col:
                        raise DataError(f"{name}: line {line}: column {i + 1} of the header has no name")
                    if col in seen:
                        raise DataError(f"{name}: line {line}: column '{col}' is named twice in the header")
                    seen.add(col)
                continue
            if len(record) != len(header):
                raise DataError(f"{name}: line {line}: {len(record)} fields, but the header has {len(header)} "
                                f"({', '.join(header)})")
            rows.append(dict(zip(header, record)))
            lines.append(line)
    except csv.Error as exc:
        what = ("a quoted field opened here is never closed" if "end of data" in str(exc)
                else f"broken CSV quoting ({exc})")
        raise DataError(f"{name}: line {start}: {what}") from None
    if header is None:
        raise DataError(f"{name}: no rows (the file is empty)")
    return Table(name, header, rows, lines)


def _columns(rows: list[dict]) -> list[str]:
    return list(dict.fromkeys(chain.from_iterable(rows)))  # every row's keys, first seen first


_CONTENT = re.compile(r"\S")


_SCAN = json.JSONDecoder().scan_once  # json.loads' own C scanner, without its per-call Python wrapping


def _jsonl(text: str, name: str) -> Table:
    """One JSON object a line. A file of plain lines (each line exactly one object, no blank line) is read by the
    C scanner json.loads itself uses, three times faster than a json.loads call a line (a task is read again in
    every process that uses it: issue 26's load target); anything else, an error included, goes through
    ``_jsonl_lines``, which skips blank lines and names the line and column of the error."""
    body = text[:-1] if text.endswith("\n") else text
    if "\r" in body:
        body = body.replace("\r\n", "\n")
    if body and body.count("\n") * 32 <= len(body):  # 32+ characters a line: never a list of millions of lines
        lines = body.split("\n")
        try:
            parsed = list(map(_SCAN, lines, repeat(0)))
        except (ValueError, RecursionError, StopIteration):  # StopIteration: no value where a line starts
            parsed = []
        rows = [obj for obj, _ in parsed]
        if (parsed and [end for _, end in parsed] == list(map(len, lines))  # nothing after the object
                and set(map(type, rows)) == {dict}):
            return Table(name, _columns(rows), rows, list(range(1, len(rows) + 1)))
    return _jsonl_lines(text, name)


def _jsonl_lines(text: str, name: str) -> Table:
    """The lines holding more than whitespace are found in C (re.search, str.find): 49 MB of newlines under the
    cap made splitlines() a 49-million-item list (468 MB for a 200 KB .gz, issue 25.6)."""
    rows, lines = [], []
    search, find, rfind, count = _CONTENT.search, text.find, text.rfind, text.count
    pos, lineno, end_all = 0, 0, len(text)
    while (m := search(text, pos)) is not None:
        at = m.start()
        start = rfind("\n", 0, at) + 1
        end = find("\n", at)
        if end < 0:
            end = end_all
        lineno += count("\n", pos, start) + 1
        line = text[start:end]
        row = _loads(line, name, lineno)
        if type(row) is not dict:
            raise DataError(f"{name}: line {lineno}: expected a JSON object, got {type(row).__name__}")
        rows.append(row)
        lines.append(lineno)
        pos = end + 1
    return Table(name, _columns(rows), rows, lines)


def _json(text: str, name: str) -> Table:
    data = _loads(text, name)
    if not isinstance(data, list):
        raise DataError(f"{name}: expected a JSON list of objects, got {type(data).__name__}")
    for i, row in enumerate(data, 1):
        if not isinstance(row, dict):
            raise DataError(f"{name}: item {i}: expected a JSON object, got {type(row).__name__}")
    return Table(name, _columns(data), data, list(range(1, len(data) + 1)), "item")


def read_table(source: str | Path | bytes, name: str | None = None, cap: int = MAX_BYTES) -> Table:
    """Every row of a .csv/.jsonl/.json file (path or uploaded bytes; ``name`` is what messages call it)."""
    label = name or (Path(source).name if not isinstance(source, bytes) else "upload")
    fmt = data_format(label)
    text = _decode(read_bytes(source, label, cap), label)
    table = {".csv": _csv, ".jsonl": _jsonl, ".json": _json}[fmt](text, label)
    if not table.rows:
        raise DataError(f"{label}: no rows")
    if len(table.columns) > MAX_COLUMNS:  # JSON rows: name the row whose keys pass the cap
        seen: set[str] = set()
        for i, row in enumerate(table.rows):  # noqa: B007 - `i` names the row below
            seen.update(row)
            if len(seen) > MAX_COLUMNS:
                break
        raise DataError(f"{table.where(i)}: the rows have {len(table.columns)} different fields, more than "
                        f"{MAX_COLUMNS}: keep only the fields the task uses")
    return table


def cell(value: Any) -> str:
    """A field's value as the text a template or a metric sees (JSON for lists and objects)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (dict, list)):
        return json.dumps(value, ensure_ascii=False)
    return str(value)
