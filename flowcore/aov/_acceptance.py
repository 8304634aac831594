"""The structural acceptance checks of a Flow task (files, HTML, CSS, LaTeX, Markdown), run INSIDE the sandbox
(flowcore.execution.sandbox.run_untrusted) on the files the agents produced, read as data: none of the agents' code runs
here, so nothing can forge these lines (the checks that run code are judged apart: flowcore/aov/tasks.py): this file's source is sent there after two assignments, ``FILES = {...}`` (name ->
text) and ``CHECKS = [...]``; it is never imported by the engine. It writes the files into the sandbox's
scratch directory, runs every check (a failing or hanging one does not stop the others) and prints one line
``@@CHECK {json}`` per check: ``{"check", "passed", "detail"}``. Only the standard library is used.
"""

import html.parser
import json
import os
import re
import signal
import sys
import traceback

FILES: dict = globals().get("FILES", {})
CHECKS: list = globals().get("CHECKS", [])
PER_CHECK_SECONDS: int = globals().get("PER_CHECK_SECONDS", 8)


class CheckTimeout(Exception):
    pass


def _alarm(signum, frame):
    raise CheckTimeout(f"took longer than {PER_CHECK_SECONDS} s")


def _where(exc: BaseException, filename: str, source: str) -> str:
    """The line of ``source`` (compiled as ``filename``) where ``exc`` was raised."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if f.filename == filename]
    if not frames:
        return ""
    lines = source.splitlines()
    n = frames[-1].lineno or 0
    return f" (line {n}: {lines[n - 1].strip() if 0 < n <= len(lines) else '?'})"


def check_files(c: dict) -> tuple[bool, str]:
    missing = [f for f in c["files"] if not os.path.isfile(f) or not open(f, encoding="utf-8").read().strip()]
    return not missing, ("missing or empty: " + ", ".join(missing)) if missing else "all present"


class _Html(html.parser.HTMLParser):
    def __init__(self, item_root: str) -> None:
        super().__init__()
        self.tags, self.ids, self.hrefs, self.inputs, self.sheets = set(), set(), set(), set(), set()
        self.root, self.depth, self.items = item_root, 0, 0

    def handle_starttag(self, tag, attrs):
        a = {k: (v or "") for k, v in attrs}
        self.tags.add(tag)
        if self.depth:
            self.depth += 1
            if tag in ("li", "tr"):
                self.items += 1
        if a.get("id"):
            self.ids.add(a["id"])
            if a["id"] == self.root and not self.depth:
                self.depth = 1
        if tag == "a" and a.get("href"):
            self.hrefs.add(a["href"])
        if tag == "input":
            self.inputs.add(a.get("type", "text").lower())
        if tag == "link" and "stylesheet" in a.get("rel", "").lower():
            self.sheets.add(a.get("href", ""))

    def handle_endtag(self, tag):
        if self.depth:
            self.depth -= 1


def check_html(c: dict) -> tuple[bool, str]:
    p = _Html(c["ids"][0] if c.get("ids") else "")
    p.feed(open(c["file"], encoding="utf-8").read())
    problems = [f"no <{t}>" for t in c.get("tags", []) if t not in p.tags]
    problems += [f"no element with id {i!r}" for i in c.get("ids", []) if i not in p.ids]
    problems += [f"no link to {h!r}" for h in c.get("links", []) if h not in p.hrefs]
    if c.get("stylesheet") and c["stylesheet"] not in p.sheets:
        problems.append(f"{c['stylesheet']} is not linked as a stylesheet")
    problems += [f"no <input type={t}>" for t in c.get("inputs", []) if t not in p.inputs]
    if p.items < c.get("min_items", 0):
        problems.append(f"#{c['ids'][0]} lists {p.items} items (at least {c['min_items']} expected)")
    return not problems, "; ".join(problems) or "structure as required"


def check_css(c: dict) -> tuple[bool, str]:
    text = re.sub(r"/\*.*?\*/", "", open(c["file"], encoding="utf-8").read(), flags=re.S)
    if text.count("{") != text.count("}"):
        return False, "unbalanced braces"
    selectors = {s.strip() for group in re.findall(r"([^{}@;]+)\{", text) for part in group.split(",")
                 for s in re.split(r"[\s>+~:]+", part.strip()) if s.strip()}
    problems = [f"no rule for {s!r}" for s in c.get("selectors", []) if s not in selectors]
    if c.get("media_query") and "@media" not in text:
        problems.append("no @media query")
    return not problems, "; ".join(problems) or "rules as required"


def check_latex(c: dict) -> tuple[bool, str]:
    text = open(c["file"], encoding="utf-8").read()
    body = re.sub(r"(?<!\\)%.*", "", text)  # comments out
    problems = []
    if not re.search(r"\\documentclass(\[[^\]]*\])?\{" + re.escape(c["documentclass"]) + r"\}", body):
        problems.append(f"not a \\documentclass{{{c['documentclass']}}} document")
    if "\\begin{document}" not in body or "\\end{document}" not in body:
        problems.append("no \\begin{document} ... \\end{document}")
    opened, closed = body.count("\\begin{frame}"), body.count("\\end{frame}")
    if opened != closed:
        problems.append(f"{opened} \\begin{{frame}} but {closed} \\end{{frame}}")
    elif not c.get("min_frames", 0) <= opened <= c.get("max_frames", 10**6):
        problems.append(f"{opened} frames (expected {c.get('min_frames')} to {c.get('max_frames')})")
    plain = re.sub(r"\\[{}]", "", body)
    if plain.count("{") != plain.count("}"):
        problems.append("unbalanced braces")
    problems += [f"no {cmd}" for cmd in c.get("commands", []) if cmd not in body]
    problems += [f"does not mention {m}" for m in c.get("mentions", []) if m not in body]
    return not problems, "; ".join(problems) or f"{opened} frames, structure as required"


def check_markdown(c: dict) -> tuple[bool, str]:
    lines = open(c["file"], encoding="utf-8").read().splitlines()
    problems = []
    if c.get("title") and not any(x.startswith("# ") for x in lines[:3]):
        problems.append("no '# ' title line at the top")
    heads = [x[3:].strip().lower() for x in lines if x.startswith("## ")]
    want = [s.lower() for s in c.get("sections", [])]
    found = [h for h in heads if h in want]
    missing = [s for s in want if s not in heads]
    if missing:
        problems.append("missing sections: " + ", ".join(missing))
    elif found != sorted(found, key=want.index):
        problems.append("sections out of order")
    words = len(re.findall(r"\w+", "\n".join(lines)))
    if not c.get("min_words", 0) <= words <= c.get("max_words", 10**9):
        problems.append(f"{words} words (expected {c.get('min_words')} to {c.get('max_words')})")
    rows, in_table = 0, False
    for x in lines:
        if re.match(r"^\s*\|?\s*:?-{3,}", x):
            in_table = True
        elif in_table and x.strip().startswith("|"):
            rows += 1
        elif not x.strip().startswith("|"):
            in_table = False
    if rows < c.get("min_table_rows", 0):
        problems.append(f"tables have {rows} data rows (at least {c['min_table_rows']} expected)")
    problems += [f"does not mention {m}" for m in c.get("mentions", []) if m not in "\n".join(lines)]
    for section, n in c.get("min_list_items_after", {}).items():
        start = next((i for i, x in enumerate(lines) if x.startswith("## ") and x[3:].strip().lower()
                      == section.lower()), None)
        items = 0
        for x in lines[start + 1:] if start is not None else []:
            if x.startswith("## "):
                break
            items += bool(re.match(r"^\s*([-*+]|\d+[.)])\s+\S", x))
        if items < n:
            problems.append(f"'{section}' lists {items} entries (at least {n} expected)")
    return not problems, "; ".join(problems) or f"{words} words, structure as required"


def main() -> None:
    for name, text in FILES.items():
        os.makedirs(os.path.dirname(name) or ".", exist_ok=True)
        with open(name, "w", encoding="utf-8") as f:
            f.write(text)
    signal.signal(signal.SIGALRM, _alarm)
    for c in CHECKS:
        label = c.get("name") or c["kind"]
        signal.alarm(PER_CHECK_SECONDS)
        try:
            passed, detail = globals()["check_" + c["kind"]](c)
        except CheckTimeout as e:
            passed, detail = False, str(e)
        except FileNotFoundError as e:
            passed, detail = False, f"file not found: {e.filename}"
        except BaseException as e:  # noqa: BLE001 - the agents' code failed: that is the check's answer
            passed, detail = False, f"{type(e).__name__}: {e}"[:400]
        finally:
            signal.alarm(0)
        sys.__stdout__.write("@@CHECK " + json.dumps({"check": label, "passed": bool(passed),
                                                      "detail": str(detail)[:600]}) + "\n")
        sys.__stdout__.flush()


if __name__ == "__main__":  # the sandbox runs this source as __main__
    main()
