"""Reading back a chart drawn on the server (flowcore.ui.svgplot) as a test sees it: parsed as XML (a drawing
that is not well-formed fails here), each series' points, lines, names, the ticks and the legend."""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from typing import Any

NS = "{http://www.w3.org/2000/svg}"


@dataclass
class Plot:
    title: str
    points: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # series -> (x, y) per point
    tips: dict[str, list[str]] = field(default_factory=dict)
    shapes: dict[str, set[str]] = field(default_factory=dict)  # series -> {"circle", "cross"}
    lines: dict[str, list[tuple[float, float]]] = field(default_factory=dict)  # series -> polyline corners (px)
    dashed: set[str] = field(default_factory=set)
    dots: dict[str, int] = field(default_factory=dict)  # series -> points drawn as one path (no hover each)
    names: dict[str, list[str]] = field(default_factory=dict)
    xticks: list[str] = field(default_factory=list)
    yticks: list[str] = field(default_factory=list)
    legend: list[str] = field(default_factory=list)
    root: Any = None


def read(svg: str) -> Plot:
    root = ET.fromstring(svg)
    title = root.attrib["aria-label"]
    p = Plot(title, root=root)
    for g in root.iter(f"{NS}g"):
        s, cls = g.get("data-series"), g.get("class")
        if cls == "mf-point":
            p.points.setdefault(s, []).append((float(g.get("data-x")), float(g.get("data-y"))))
            tip = g.find(f"{NS}title")
            p.tips.setdefault(s, []).append(tip.text if tip is not None else "")
            p.shapes.setdefault(s, set()).add("cross" if g.find(f"{NS}path") is not None else "circle")
        elif cls == "mf-legend":
            p.legend.append(s)
    for path in root.iter(f"{NS}path"):
        if path.get("class") == "mf-dots":
            p.dots[path.get("data-series")] = path.get("d").count("M")
    for line in root.iter(f"{NS}polyline"):
        s = line.get("data-series")
        p.lines[s] = [tuple(map(float, xy.split(","))) for xy in line.get("points").split()]
        if line.get("stroke-dasharray"):
            p.dashed.add(s)
    for t in root.iter(f"{NS}text"):
        cls = t.get("class")
        if cls == "mf-name":
            p.names.setdefault(t.get("data-series"), []).append(t.get("data-label"))
        elif cls == "mf-xtick":
            p.xticks.append(t.text)
        elif cls == "mf-ytick":
            p.yticks.append(t.text)
    return p


def app_plots(at: Any) -> list[Plot]:
    """The server-drawn charts an AppTest run put on the page (a markdown element holding one ``<svg>``)."""
    return [read(m.value) for m in at.markdown if m.value.startswith("<svg")]
