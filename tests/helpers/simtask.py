"""A generated task of your own for the simulated executor (issue 31 on a user's task): 400 rows, kind ``text``,
metric ``exact``, written as a user writes one (a CSV beside a TOML file, as assets/tasks/capitals/), with no data
downloaded. Each row asks for one operation on one word; the reference is computed, so every row is right.

    toml = write_letters_task(tmp_dir)          # letters.csv + letters.toml in tmp_dir
    task = flowcore.tasks.from_file(toml)       # the task "letters": 80 validation rows, 320 test rows
"""
from __future__ import annotations

import csv
from collections.abc import Callable
from pathlib import Path

WORDS = (
    "apple", "bridge", "candle", "dragon", "engine", "forest", "garden", "harbor", "island", "jacket", "kitten",
    "ladder", "marble", "needle", "orange", "pencil", "quartz", "rabbit", "saddle", "tablet", "umbrella", "velvet",
    "window", "yellow", "zipper", "anchor", "basket", "cactus", "dinner", "falcon", "glider", "hammer", "insect",
    "jungle", "kettle", "lantern", "magnet", "napkin", "oyster", "parrot", "quiver", "ribbon", "silver", "tunnel",
    "violin", "walnut", "yogurt", "zebra", "almond", "button", "castle", "desert", "feather", "guitar", "helmet",
    "igloo", "jigsaw", "kernel", "lizard", "meadow", "nickel", "pillow", "rocket", "sandal", "thistle", "unicorn",
    "vessel", "wizard", "badger", "cobalt", "dolphin", "emerald", "fabric", "goblet", "hornet", "ivory", "juniper",
    "kayak", "lemon", "mitten", "nutmeg", "orchid", "pepper", "quill", "raven", "spider", "turnip", "valley",
    "willow", "bamboo", "copper", "donkey", "ginger", "hazel", "lagoon", "mango", "planet", "salmon", "tomato",
    "walrus",
)
OPERATIONS: dict[str, Callable[[str], str]] = {
    "write it backwards": lambda w: w[::-1],
    "sort its letters alphabetically": lambda w: "".join(sorted(w)),
    "count its letters": lambda w: str(len(w)),
    "give its letters that are vowels, in order": lambda w: "".join(c for c in w if c in "aeiou"),
}
TOML = """# A generated task of your own (tests/helpers/simtask.py): {rows} rows, one operation on one word each.
name = "letters"
kind = "text"
data = "letters.csv"
problem = "Take the word '{{word}}' and {{operation}}. Reply with the result only."
reference = "answer"
metric = "exact"
id = "id"
description = "Operations on the letters of a word (generated; exact match, case folded)."

[metric_options]
case_sensitive = false

[split]
validation = 0.2
seed = 42
"""


def letters_rows() -> list[dict[str, str]]:
    """Every (word, operation) pair: 100 words x 4 operations = 400 rows, each problem text distinct."""
    return [{"id": f"{w}-{i}", "word": w, "operation": op, "answer": fn(w)}
            for w in WORDS for i, (op, fn) in enumerate(OPERATIONS.items())]


def write_letters_task(folder: str | Path) -> Path:
    """letters.csv and letters.toml in ``folder``; returns the TOML file's path."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rows = letters_rows()
    with open(folder / "letters.csv", "w", newline="", encoding="utf-8") as f:
        out = csv.DictWriter(f, fieldnames=["id", "word", "operation", "answer"])
        out.writeheader()
        out.writerows(rows)
    (folder / "letters.toml").write_text(TOML.format(rows=len(rows)), encoding="utf-8")
    return folder / "letters.toml"
