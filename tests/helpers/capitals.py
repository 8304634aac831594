"""A scripted model for the worked example task (assets/tasks/capitals): it knows the capitals of the countries
whose name is shorter than 8 letters and guesses 'Springfield' for the rest, and it answers the IO prompt without
an 'Answer:' line, so workflows differ in score in a known way."""

from __future__ import annotations

import csv
from pathlib import Path

from tests.helpers.fakellm import message_text

CSV = Path(__file__).resolve().parents[2] / "assets" / "tasks" / "capitals" / "capitals.csv"
CITIES = {r["country"]: r["capital"] for r in csv.DictReader(open(CSV, encoding="utf-8"))}


def capitals_reply(request: dict) -> str | None:
    """The reply to a capitals question (None when the request asks none)."""
    text = message_text(request)
    country = next((c for c in sorted(CITIES, key=len, reverse=True) if f"capital of {c}?" in text), None)
    if country is None:
        return None
    city = CITIES[country] if len(country) < 8 else "Springfield"
    if "Reply with only the answer" in text:  # the IO baseline: the city alone, right only for short names
        return city
    return f"The capital of {country} is well known.\nAnswer: {city}"
