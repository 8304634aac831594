"""Every place a page hands untrusted text to a call that renders markdown goes through the escaper (issue 25:
untrusted text on pages; attacks a05 and a06 were a column name and an endpoint's error quoted raw, so a
``![x](http://…)`` in them was an image every viewer's browser fetched).

A static sweep of pages/ and flowcore/ui/: in the first argument (or ``help=``) of st.markdown / caption / error /
warning / info / success / write / toast / metric / title / header / subheader, any value that comes from an
exception (a name bound by ``except … as e``) or from a field that holds outside text (``.error``, ``["detail"]``,
``.columns``, …) must be wrapped in an escaper (``md``, ``common.md``, ``safe.plain``, ``safe.markdown``,
``safe.code``) or only counted (``len``) or formatted as a number (``:.1f``). It flags by where the text comes
from, not by shape, so ids, statuses and numbers pass without a list of exceptions."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SINKS = {"markdown", "caption", "error", "warning", "info", "success", "write", "toast", "metric", "title",
         "header", "subheader"}
ESCAPERS = {"md", "plain", "markdown", "code"}
COUNTS = {"len", "int", "float", "round", "bool", "sum", "min", "max", "abs"}
# fields whose values are outside text: an endpoint's or a run's error, an LLM's words, names users typed
OUTSIDE = {"error", "reason", "detail", "text", "rationale", "answer", "message", "created_by", "model", "columns",
           "workflow_name", "source", "judge"}


def _escaped(node: ast.AST) -> bool:
    if not isinstance(node, ast.Call):
        return False
    f = node.func
    if isinstance(f, ast.Name):
        return f.id in ESCAPERS or f.id in COUNTS
    return (isinstance(f, ast.Attribute) and f.attr in ESCAPERS and isinstance(f.value, ast.Name)
            and f.value.id in ("safe", "common"))


def _outside(node: ast.AST, exc_names: set[str]) -> list[str]:
    """Sources of outside text in ``node`` that no escaper (or count) wraps."""
    if _escaped(node):
        return []
    if isinstance(node, ast.FormattedValue) and node.format_spec is not None \
            and any(c in ast.unparse(node.format_spec) for c in "fdeg%,"):
        return []  # formatted as a number
    found = []
    if isinstance(node, ast.Name) and node.id in exc_names:
        found.append(node.id)
    elif isinstance(node, ast.Attribute) and node.attr in OUTSIDE:
        found.append(ast.unparse(node))
    elif isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and node.slice.value in OUTSIDE:
        found.append(ast.unparse(node))
    if isinstance(node, ast.Call):  # the callee is not data: `x.text.strip()` is, through its receiver
        children = [*node.args, *(k.value for k in node.keywords)]
        if isinstance(node.func, ast.Attribute):
            children.append(node.func.value)
    else:
        children = list(ast.iter_child_nodes(node))
    for child in children:
        found += _outside(child, exc_names)
    return found


def _is_sink(call: ast.Call) -> bool:
    f = call.func
    return (isinstance(f, ast.Attribute) and f.attr in SINKS
            and not (isinstance(f.value, ast.Name) and f.value.id in ("safe", "common", "re", "json")))


def unescaped(source: str, filename: str) -> list[str]:
    """'file:line: expression' for each unescaped outside text in a markdown call of ``source``."""
    tree = ast.parse(source)
    out = []
    for func in [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))] + [tree]:
        exc_names = {h.name for h in ast.walk(func) if isinstance(h, ast.ExceptHandler) and h.name}
        for call in ast.walk(func):
            if not (isinstance(call, ast.Call) and _is_sink(call)):
                continue
            args = call.args[:1] + [k.value for k in call.keywords if k.arg in ("help", "body", "label")]
            for arg in args:
                out += [f"{filename}:{call.lineno}: {src}" for src in _outside(arg, exc_names)]
    return sorted(set(out))


def test_no_page_puts_outside_text_into_markdown_unescaped():
    files = sorted((ROOT / "pages").glob("*.py")) + sorted((ROOT / "flowcore" / "ui").glob("*.py"))
    found = [hit for f in files for hit in unescaped(f.read_text(), str(f.relative_to(ROOT)))]
    assert found == [], "escape these with common.md / safe.plain / safe.markdown:\n" + "\n".join(found)


def test_the_sweep_finds_the_attacks_it_was_built_for():
    """The two lines attacks a05 and a06 found, and the usual shapes, as they were before the fix."""
    before = '''
def upload_step():
    st.caption(f"{len(table.rows)} rows · columns: {', '.join(table.columns)}")
def one():
    if "error" in out:
        st.error(f"The run failed: {out['error']}", icon=":material/error:")
    try:
        go()
    except ValueError as e:
        st.error(str(e))
        c[1].warning(f"Not started: {e}")
        st.metric("x", 1, help=f"{row.reason}")
    st.success(f"answered: {reply.text.strip()[:200]} in {reply.latency:.2f} s")
'''
    assert sorted(h.split(": ", 1)[1] for h in unescaped(before, "p.py")) == [
        "e", "e", "out['error']", "reply.text", "row.reason", "table.columns"]
    after = '''
def upload_step():
    st.caption(f"{len(table.rows)} rows · columns: {common.md(', '.join(table.columns))}")
def one():
    st.error(f"The run failed: {safe.markdown(out['error'])} ({len(out['error'])} chars)", icon=":material/error:")
    try:
        go()
    except ValueError as e:
        st.error(md(e))
    st.success(f"answered: {safe.plain(reply.text.strip()[:200])} in {reply.latency:.2f} s, status {rec.status}")
'''
    assert unescaped(after, "p.py") == []
