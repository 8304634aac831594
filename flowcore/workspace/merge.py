"""A line-based three-way merge (what ``diff3 -m`` does): the changes two people made to one base text, both kept.

Each side's changes are the base's line ranges it replaced (``difflib``'s opcodes). Ranges that one side changed
and the other left alone take that side's lines; ranges both changed the same way take them once; ranges both
changed differently (or that touch) are a conflict, and the merge reports it instead of picking one.
"""

from __future__ import annotations

from difflib import SequenceMatcher


def _changes(base: list[str], other: list[str]) -> list[tuple[int, int, list[str]]]:
    """(base start, base end, replacement lines) for every range ``other`` changed."""
    out = []
    for tag, i1, i2, j1, j2 in SequenceMatcher(None, base, other, autojunk=False).get_opcodes():
        if tag != "equal":
            out.append((i1, i2, other[j1:j2]))
    return out


def merge3(base: str, mine: str, theirs: str) -> tuple[str, list[tuple[int, int]]]:
    """(merged text, conflicts): each conflict as the 1-based base line range both sides changed differently.
    With conflicts the text keeps *mine* in those ranges; callers should not offer it as a clean merge."""
    b = base.splitlines(keepends=True)
    ours, other = _changes(b, mine.splitlines(keepends=True)), _changes(b, theirs.splitlines(keepends=True))
    tagged = sorted([(s, e, lines, 0) for s, e, lines in ours] + [(s, e, lines, 1) for s, e, lines in other],
                    key=lambda c: (c[0], c[1], c[3]))
    out: list[str] = []
    conflicts: list[tuple[int, int]] = []
    pos, k = 0, 0
    while k < len(tagged):
        start, end, lines, side = tagged[k]
        group = [tagged[k]]
        k += 1
        # changes that overlap (or touch at one point, an insertion beside an edit) belong together
        while k < len(tagged) and (tagged[k][0] < end or tagged[k][0] == start or tagged[k][0] == end
                                   and (tagged[k][0] == tagged[k][1] or start == end)):
            group.append(tagged[k])
            end = max(end, tagged[k][1])
            k += 1
        out.extend(b[pos:start])
        sides = {g[3] for g in group}
        if len(sides) == 1:
            cur = start
            for s, e, repl, _ in group:
                out.extend(b[cur:s])
                out.extend(repl)
                cur = e
            out.extend(b[cur:end])
        else:
            a = _apply(b, start, end, [g for g in group if g[3] == 0])
            t = _apply(b, start, end, [g for g in group if g[3] == 1])
            out.extend(a)
            if a != t:
                conflicts.append((start + 1, max(start + 1, end)))
        pos = end
    out.extend(b[pos:])
    return "".join(out), conflicts


def _apply(b: list[str], start: int, end: int, changes: list) -> list[str]:
    out, cur = [], start
    for s, e, repl, _ in changes:
        out.extend(b[cur:s])
        out.extend(repl)
        cur = e
    out.extend(b[cur:end])
    return out
