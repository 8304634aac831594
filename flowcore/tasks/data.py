"""Benchmark loaders: GSM8K, MATH (level 5), HumanEval, MBPP (sanitized), and the validation/test split.

Files live in `assets/datasets/` (override the directory with $FLOWCORE_DATASETS). `load(..., data_path=F)`
reads a user file in the benchmark's own row format instead; then the split is not applied.
"""
from __future__ import annotations

import ast
import gzip
import io
import json
import os
import random
import re
import zlib
from pathlib import Path
from typing import Any

from flowcore.execution._standalone_ops import is_literal
from flowcore.tasks import jsontext
from flowcore.tasks.errors import DataError
from flowcore.tasks.problem import BENCHMARKS, Problem
from flowcore.workspace.files import write_file

SPLITS = ("validation", "test")
DEFAULT_FILES = {
    "gsm8k": "gsm8k_test.jsonl",
    "math": "math_test_level5_cp_nt_prealg_precalc.jsonl",
    "humaneval": "HumanEval.jsonl.gz",
    "mbpp": "mbpp_sanitized.json",
}


def datasets_dir() -> Path:
    env = os.environ.get("FLOWCORE_DATASETS")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "assets" / "datasets"


# ---------------------------------------------------------------- split

def split_ids(ids: list[str], seed: int = 42) -> tuple[list[str], list[str]]:
    """validation:test = 1:4. Deterministic shuffle; validation size round(n/5); both parts keep input order."""
    order = list(range(len(ids)))
    random.Random(seed).shuffle(order)
    k = round(len(ids) / 5)
    val = set(order[:k])
    return [ids[i] for i in range(len(ids)) if i in val], [ids[i] for i in range(len(ids)) if i not in val]


# ---------------------------------------------------------------- reading rows

# A data file is read as a stream and never past this many bytes once decompressed: a 199 KB .jsonl.gz can hold
# 200 MB of newlines (it took the app to 1.9 GB). MERMAIDFLOW_MAX_DATA_MB changes it.
MAX_DATA_MB = 50


def max_data_bytes() -> int:
    raw = (os.environ.get("MERMAIDFLOW_MAX_DATA_MB") or "").strip()
    try:
        mb = float(raw) if raw else MAX_DATA_MB
    except ValueError:
        raise DataError(f"environment variable MERMAIDFLOW_MAX_DATA_MB={raw!r} is not a number of MB") from None
    return int(mb * 1024 * 1024)


class _Capped(io.RawIOBase):
    """A binary stream (a file, or its gzip decompression) that raises DataError once more than ``cap`` bytes
    have come out of it: the decompressed size is checked as it is read, never after."""

    def __init__(self, raw: Any, path: Path, cap: int) -> None:
        self.raw, self.path, self.cap, self.seen = raw, path, cap, 0

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        n = self.raw.readinto(b)
        self.seen += n or 0
        if self.seen > self.cap:
            raise DataError(f"{self.path}: more than {self.cap / (1024 * 1024):g} MB once decompressed (the limit "
                            "for a data file; MERMAIDFLOW_MAX_DATA_MB sets it)")
        return n


def _open_stream(path: Path) -> io.BufferedReader:
    raw = gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")  # noqa: SIM115
    return io.BufferedReader(_Capped(raw, path, max_data_bytes()), 1 << 16)


_CONTENT = re.compile(r"\S")


def _read_rows(path: Path) -> list[tuple[int, Any]]:
    """(line number, row) pairs; for a .json list the 'line' is the item's 1-based index. Read as a stream,
    never past max_data_bytes() after decompression (DataError naming the file and the limit); blank lines are
    skipped in C (str.find, re.search), so a file of newlines costs no Python loop per line."""
    name = path.name.lower()
    try:
        with _open_stream(path) as stream:
            first = stream.peek(1 << 16)[:1 << 16].lstrip().removeprefix(b"\xef\xbb\xbf").lstrip()
            text = io.TextIOWrapper(stream, encoding="utf-8-sig")
            if name.endswith((".json", ".json.gz")) or first.startswith(b"["):
                return _json_list(path, text.read())
            rows: list[tuple[int, Any]] = []
            lineno, carry = 0, ""  # lines before `body`; a last line not ended yet
            while True:
                chunk = text.read(1 << 20)
                body = carry + chunk
                cut = len(body) if not chunk else body.rfind("\n") + 1
                body, carry = body[:cut], body[cut:]
                pos = 0
                while (m := _CONTENT.search(body, pos)) is not None:
                    start = body.rfind("\n", 0, m.start()) + 1
                    end = body.find("\n", m.start())
                    end = len(body) if end < 0 else end
                    lineno += body.count("\n", pos, start) + 1
                    rows.append((lineno, jsontext.loads(body[start:end], path, lineno)))
                    pos = end + 1
                lineno += body.count("\n", min(pos, len(body)))
                if not chunk:
                    return rows
    except FileNotFoundError:
        raise DataError(f"{path}: file not found") from None
    except (OSError, UnicodeDecodeError, EOFError, zlib.error) as exc:
        raise DataError(f"{path}: cannot read ({exc})") from None


def _json_list(path: Path, text: str) -> list[tuple[int, Any]]:
    data = jsontext.loads(text, path)
    if not isinstance(data, list):
        raise DataError(f"{path}: expected a JSON list of rows")
    return [(i + 1, row) for i, row in enumerate(data)]


class _Row:
    """Field access that reports file, line and field on a missing or mistyped value."""

    def __init__(self, path: Path, lineno: int, row: Any):
        if not isinstance(row, dict):
            raise DataError(f"{path}: line {lineno}: expected a JSON object, got {type(row).__name__}")
        self.path, self.lineno, self.row = path, lineno, row

    def error(self, msg: str) -> DataError:
        return DataError(f"{self.path}: line {self.lineno}: {msg}")

    def str(self, *names: str, required: bool = True) -> str:
        for name in names:
            value = self.row.get(name)
            if value is None:
                continue
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                return str(value)
            if not isinstance(value, str):
                raise self.error(f"field '{name}' must be a string")
            if value.strip() or not required:
                return value
            raise self.error(f"field '{name}' is empty")
        if required:
            raise self.error(f"missing field '{'|'.join(names)}'")
        return ""

    def str_list(self, name: str, required: bool = True) -> list[str]:
        value = self.row.get(name)
        if value is None and not required:
            return []
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise self.error(f"missing field '{name}' (a list of strings)")
        if required and not value:
            raise self.error(f"field '{name}' is empty")
        return value


# ---------------------------------------------------------------- per-benchmark rows

def gsm8k_answer(answer: str) -> str:
    """The gold number after '####', commas removed."""
    return answer.rsplit("####", 1)[-1].strip().replace(",", "")


def _gsm8k(r: _Row, index: int) -> Problem:
    answer = r.str("answer")
    if "####" not in answer:
        raise r.error("field 'answer' has no '#### <number>' final answer")
    return Problem(id=f"gsm8k/{index}", benchmark="gsm8k", question=r.str("question"),
                   reference=gsm8k_answer(answer), meta={"solution": answer})


def _math(r: _Row, index: int) -> Problem:
    from flowcore.tasks.scoring import last_boxed

    solution = r.str("solution")
    answer = last_boxed(solution)
    if answer is None:
        raise r.error("field 'solution' has no \\boxed{...} answer")
    meta = {"solution": solution}
    for key in ("level", "type", "subject"):
        if isinstance(r.row.get(key), str):
            meta[key] = r.row[key]
    uid = r.row.get("unique_id")
    return Problem(id=str(uid) if uid else f"math/{index}", benchmark="math", question=r.str("problem"),
                   reference=answer, meta=meta)


def _humaneval(r: _Row, index: int) -> Problem:
    prompt, entry = r.str("prompt"), r.str("entry_point").strip()
    test = r.str("test")
    if "def check(" not in test:
        raise r.error("field 'test' defines no check(candidate) function")
    return Problem(
        id=r.str("task_id", required=False) or f"humaneval/{index}", benchmark="humaneval", question=prompt,
        reference=r.str("canonical_solution", required=False), entry_point=entry,
        tests=test,  # defines check(candidate); the sandbox calls it with the entry point
        public_tests="\n".join(a for a in docstring_asserts(prompt, entry) if a not in _WRONG_EXAMPLES),
    )


# Docstring examples of HumanEval that its own canonical solution and hidden tests contradict (typos in the
# benchmark, or lines that describe a recurrence rather than the function's output). Giving them to a TestOp
# would push correct code towards a wrong answer, so they are not public tests.
_WRONG_EXAMPLES = frozenset({
    "assert median([-10, 4, 6, 1000, 10, 20]) == 15.0",
    "assert sort_array([1, 5, 2, 3, 4]) == [1, 2, 3, 4, 5]",
    "assert sort_array([-2, -3, -4, -5, -6]) == [-6, -5, -4, -3, -2]",
    "assert tri(1) == 3",
    "assert tri(4) == 3",
    'assert bf("Earth", "Mercury") == ("Venus")',
})


_ASSERT_CALL = re.compile(r"^\s*assert\s+(?:\w+\s*\(\s*)*([A-Za-z_]\w*)\s*\(")


def _mbpp(r: _Row, index: int) -> Problem:
    text, code = r.str("text", "prompt"), r.str("code")
    tests = r.str_list("test_list")
    setup = r.str("test_setup_code", required=False).strip()
    imports = "\n".join(r.str_list("test_imports", required=False))
    prelude = "\n".join(p for p in (imports, setup) if p)
    entry = _mbpp_entry(tests[0], code)
    if entry is None:
        raise r.error("cannot find the function name in 'test_list'[0] or 'code'")
    task_id = r.row.get("task_id")
    head = f"{prelude}\n" if prelude else ""
    return Problem(
        id=f"mbpp/{task_id}" if task_id is not None else f"mbpp/{index}", benchmark="mbpp",
        question=f"{text}\nYour code should pass this test:\n{tests[0]}", reference=code, entry_point=entry,
        tests=head + "\n".join(tests) + "\n", public_tests=head + tests[0],
        meta={"test_list": tests},
    )


def _mbpp_entry(first_test: str, code: str) -> str | None:
    defined = re.findall(r"^def\s+([A-Za-z_]\w*)\s*\(", code, re.MULTILINE)
    # The first call in the assert that the code defines; else the first call; else the code's first def.
    calls = re.findall(r"([A-Za-z_]\w*)\s*\(", first_test.split("assert", 1)[-1])
    for name in calls:
        if name in defined:
            return name
    builtins = {"set", "sorted", "list", "tuple", "abs", "round", "len", "str", "int", "float", "math", "isclose"}
    for name in calls:
        if name not in builtins:
            return name
    return defined[0] if defined else None


_PARSERS = {"gsm8k": _gsm8k, "math": _math, "humaneval": _humaneval, "mbpp": _mbpp}


# ---------------------------------------------------------------- HumanEval public examples

_SEPARATORS = re.compile(r"^\s*(?:#\s*)?(?:==>|=>|==|➞|->|=|returns|should\s+return|is)\s*(?::\s*)?")


def _call_end(text: str, start: int) -> int:
    """Index after the parenthesis that closes the one at `start` (-1 if unbalanced); skips string literals."""
    depth, i, quote = 0, start, ""
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return -1


_SAFE_CALLS = {"round", "sorted", "list", "tuple", "set", "len", "abs"}


def _literal_call(call: str, entry: str) -> bool:
    """True for an expression that calls `entry` on literals, possibly wrapped in round()/sorted()/..."""
    try:
        tree = ast.parse(call, mode="eval")
    except SyntaxError:
        return False
    called = False
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name) or node.keywords:
                return False
            if node.func.id == entry:
                called = True
            elif node.func.id not in _SAFE_CALLS:
                return False
            if not all(isinstance(a, ast.Call) or is_literal(ast.unparse(a)) for a in node.args):
                return False
        elif isinstance(node, ast.Name) and node.id not in _SAFE_CALLS | {entry}:
            return False
    return called and isinstance(tree.body, ast.Call)


def _unparse(src: str) -> str:
    return ast.unparse(ast.parse(src, mode="eval"))


def _doctest_line(src: str) -> tuple[str, str | None]:
    """Split `>>> call  # note` or `>>> call == value` into (call, inline expected value or None)."""
    try:
        ast.parse(src, mode="eval")
    except SyntaxError:
        src = re.sub(r"\s+#[^'\"]*$", "", src)
    try:
        node = ast.parse(src, mode="eval").body
    except SyntaxError:
        return src, None
    if (isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.Eq)
            and is_literal(ast.unparse(node.comparators[0]))):
        return ast.unparse(node.left), ast.unparse(node.comparators[0])
    return src, None


def _expected(rest: str) -> str | None:
    rest = _SEPARATORS.sub("", rest, count=1).strip()
    rest = re.sub(r"\s+#.*$", "", rest).rstrip(" .")
    if rest in ("true", "false"):
        rest = rest.capitalize()
    if not is_literal(rest):  # a trailing remark: 'No' (the name should ...)
        rest = re.sub(r"\s+\([^()]*\)$", "", rest)
    return rest if rest and is_literal(rest) else None


def docstring_asserts(prompt: str, entry: str) -> list[str]:
    """Examples of the prompt as `assert call == expected` lines: `>>> f(x)` + output lines, and one-line
    forms such as `f(x) == y`, `f(x) => y`, `f(x) ➞ y`, `f(x) should return y`. Only calls with literal
    arguments and literal results are kept, so every assert is runnable without guessing."""
    lines = prompt.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = re.sub(r"^[rRuU]?(?:\"\"\"|''')", "", lines[i].strip()).strip()  # `"""f(1) == 2`
        i += 1
        if line.startswith(">>>"):
            src = line[3:].strip()
            while i < len(lines) and lines[i].strip().startswith("..."):  # doctest continuation lines
                src += " " + lines[i].strip()[3:].strip()
                i += 1
            call, inline = _doctest_line(src)
            expect: list[str] = [inline] if inline else []
            # Output lines up to the first that completes a literal (or a blank / next example / docstring end).
            while not inline and i < len(lines):
                nxt = lines[i].strip()
                if not nxt or nxt.startswith((">>>", '"""', "'''")):
                    break
                expect.append(nxt)
                i += 1
                if is_literal(" ".join(expect)):
                    break
            value = " ".join(expect)
            if _literal_call(call, entry) and value and is_literal(value):
                # unparse drops comments: `f(x)  # note == y` would assert nothing
                out.append(f"assert {_unparse(call)} == {_unparse(value)}")
            continue
        line = re.sub(r"^(?:[*\-]|for|e\.g\.)\s+", "", line)
        if not line.startswith(entry + "("):
            continue
        end = _call_end(line, len(entry))
        if end < 0:
            continue
        call, value = line[:end], _expected(line[end:])
        if value is not None and _literal_call(call, entry):
            out.append(f"assert {call} == {value}")
    return list(dict.fromkeys(out))


# ---------------------------------------------------------------- load

def read_problems(benchmark: str, path: str | Path) -> list[Problem]:
    """Every row of `path` (rows in the benchmark's own format) as Problems, in file order."""
    if benchmark not in _PARSERS:
        raise ValueError(f"unknown benchmark '{benchmark}' (choose from {', '.join(BENCHMARKS)})")
    path = Path(path)
    parse = _PARSERS[benchmark]
    problems = [parse(_Row(path, lineno, row), i) for i, (lineno, row) in enumerate(_read_rows(path))]
    if not problems:
        raise DataError(f"{path}: no rows")
    seen: dict[str, int] = {}
    for p in problems:
        seen[p.id] = seen.get(p.id, 0) + 1
    dupes = [k for k, v in seen.items() if v > 1]
    if dupes:
        raise DataError(f"{path}: duplicate id '{dupes[0]}'")
    return problems


def load(benchmark: str, split: str | None = "validation", *, data_path: str | Path | None = None,
         limit: int | None = None, seed: int = 42, split_file: str | Path | None = None) -> list[Problem]:
    """Problems of one benchmark. split: 'validation', 'test', or None/'all' for every row. With data_path the
    file's rows are all used (split ignored). split_file: a user's split (see read_split_file) instead of
    ours. limit keeps the first N after splitting."""
    if benchmark not in BENCHMARKS:
        raise ValueError(f"unknown benchmark '{benchmark}' (choose from {', '.join(BENCHMARKS)})")
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be >= 0, got {limit}")
    if data_path is not None:
        problems = read_problems(benchmark, data_path)
    else:
        problems = read_problems(benchmark, datasets_dir() / DEFAULT_FILES[benchmark])
        if split not in (None, "all"):
            if split not in SPLITS:
                raise ValueError(f"unknown split '{split}' (choose from validation, test, all)")
            if split_file is not None:
                parts = read_split_file(split_file, benchmark, [p.id for p in problems])
                val, test = parts["validation"], parts["test"]
                if not (val if split == "validation" else test):  # nothing to score: never a 0% of nothing
                    raise DataError(f"{split_file}: field '{split}' is empty: the split file names no {split} "
                                    "problems")
            else:
                val, test = split_ids([p.id for p in problems], seed)
            keep = set(val if split == "validation" else test)
            problems = [p for p in problems if p.id in keep]
    return problems[:limit] if limit is not None else problems


# ---------------------------------------------------------------- split files and what a split is

# Validation/test sizes of the papers' data files (MermaidFlow and AFlow ship them); ours come from split_ids.
PAPER_SPLITS = {"math": (119, 486), "mbpp": (86, 341)}
OUR_SPLIT = ("our split: one problem in five for validation (evolution), the other four for the final test, "
             "always the same problems (shuffled with seed 42)")


def read_split_file(path: str | Path, benchmark: str, known_ids: list[str] | None = None) -> dict[str, list[str]]:
    """A user's split: JSON ``{"benchmark": B, "validation": [ids], "test": [ids]}`` (``benchmark`` optional).
    DataError naming the file and the offending id when an id is unknown, listed twice or in both parts."""
    path = Path(path)
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise DataError(f"{path}: split file not found") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise DataError(f"{path}: cannot read ({exc})") from None
    except json.JSONDecodeError as exc:
        raise DataError(f"{path}: line {exc.lineno}, column {exc.colno}: invalid JSON ({exc.msg})") from None
    if not isinstance(doc, dict):
        raise DataError(f'{path}: expected an object {{"validation": [ids], "test": [ids]}}')
    if doc.get("benchmark") not in (None, benchmark):
        raise DataError(f"{path}: a split of '{doc['benchmark']}', not of '{benchmark}'")
    parts: dict[str, list[str]] = {}
    for name in SPLITS:
        ids = doc.get(name)
        if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids):
            raise DataError(f"{path}: field '{name}' must be a list of problem ids (strings)")
        dupes = sorted({i for i in ids if ids.count(i) > 1})
        if dupes:
            raise DataError(f"{path}: field '{name}' lists id '{dupes[0]}' twice")
        parts[name] = ids
    both = sorted(set(parts["validation"]) & set(parts["test"]))
    if both:
        raise DataError(f"{path}: id '{both[0]}' is in both validation and test")
    if known_ids is not None:
        known = set(known_ids)
        for name in SPLITS:
            unknown = [i for i in parts[name] if i not in known]
            if unknown:
                raise DataError(f"{path}: field '{name}': id '{unknown[0]}' is not a {benchmark} problem")
    return parts


def split_info(benchmark: str, split: str | None, *, data_path: str | Path | None = None,
               split_file: str | Path | None = None, limit: int | None = None) -> dict[str, Any]:
    """What a set of problems is, for every exported result: whose split, its sizes, and the papers' sizes."""
    if data_path is not None:
        return {"benchmark": benchmark, "split": "file", "source": f"the rows of {Path(data_path).name}",
                "limit": limit}
    ids = [p.id for p in read_problems(benchmark, datasets_dir() / DEFAULT_FILES[benchmark])]
    if split_file is not None:
        parts = read_split_file(split_file, benchmark, ids)
        val, test, source = parts["validation"], parts["test"], f"split file {Path(split_file).name}"
    else:
        (val, test), source = split_ids(ids), OUR_SPLIT
    paper = PAPER_SPLITS.get(benchmark)
    return {"benchmark": benchmark, "split": split or "all", "source": source, "validation_n": len(val),
            "test_n": len(test), "limit": limit,
            "papers": None if paper is None else {"validation_n": paper[0], "test_n": paper[1]},
            "note": "our split is not the papers' files: scores are not directly comparable with theirs"
            if split_file is None else "a user-supplied split"}


def write_split_file(benchmark: str, path: str | Path, seed: int = 42) -> dict[str, Any]:
    """Our split of a bundled benchmark as a split file (to inspect, edit and pass back with --split-file)."""
    ids = [p.id for p in read_problems(benchmark, datasets_dir() / DEFAULT_FILES[benchmark])]
    val, test = split_ids(ids, seed)
    doc = {"benchmark": benchmark, "seed": seed, "validation": val, "test": test}
    write_file(path, json.dumps(doc, indent=1) + "\n")
    return doc
