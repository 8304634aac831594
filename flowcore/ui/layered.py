"""A layered (Sugiyama) drawing of a directed graph whose layers are given (no Streamlit here): each edge that
skips layers gets a bend point in every layer it crosses (a dummy node with a slot of its own, so no node stands
in its way), the order within each layer comes from barycenter sweeps down and up keeping the order with the
fewest crossings, and the positions across the layers are pulled toward the neighbours' average while keeping
the order and a minimum gap. Positions are in slot units (a node is 1 wide, a bend :data:`BEND` wide).
"""

from __future__ import annotations

from collections import defaultdict

BEND = 0.2  # how much room a bend point takes in a layer, in node widths
GAP = 0.2  # the space between two neighbours in a layer, in node widths
SWEEPS = 24


def _crossings(order: list[list[str]], down: dict[str, list[str]]) -> int:
    """Crossings between each pair of adjacent layers (every edge joins adjacent layers here)."""
    total = 0
    for r in range(len(order) - 1):
        below = {n: i for i, n in enumerate(order[r + 1])}
        pairs = [(i, below[m]) for i, n in enumerate(order[r]) for m in down[n] if m in below]
        total += sum(1 for a in range(len(pairs)) for b in range(a + 1, len(pairs))
                     if (pairs[a][0] - pairs[b][0]) * (pairs[a][1] - pairs[b][1]) < 0)
    return total


def _sweep(order: list[list[str]], near: dict[str, list[str]], layers: range, ref: int) -> None:
    for r in layers:
        pos = {n: i for i, n in enumerate(order[r + ref])}
        scale = len(order[r + ref]) / max(len(order[r]), 1)  # a node with no neighbour there keeps its place
        keys = []
        for i, n in enumerate(order[r]):
            ps = [pos[m] for m in near[n] if m in pos]
            keys.append(sum(ps) / len(ps) if ps else i * scale)
        order[r] = [n for _, n in sorted(zip(keys, order[r], strict=True), key=lambda kn: kn[0])]


def _isotonic(values: list[float]) -> list[float]:
    """The non-decreasing sequence closest to ``values`` (least squares): pool adjacent violators."""
    blocks: list[list[float]] = []  # [sum, count]
    for v in values:
        blocks.append([v, 1.0])
        while len(blocks) > 1 and blocks[-2][0] / blocks[-2][1] > blocks[-1][0] / blocks[-1][1]:
            a, b = blocks.pop(-2), blocks[-1]
            b[0] += a[0]
            b[1] += a[1]
    out: list[float] = []
    for total, count in blocks:
        out += [total / count] * int(count)
    return out


def _place(order: list[list[str]], up: dict, down: dict, width: dict) -> dict[str, float]:
    """Centres across the layers: each layer as close as it can be to its neighbours' average (least squares)
    while keeping its order and the gaps, layer by layer down and up a few times."""
    x: dict[str, float] = {}
    for layer in order:  # packed and centred on 0 to start
        at, row = 0.0, []
        for n in layer:
            row.append(at + width[n] / 2)
            at += width[n] + GAP
        for n, v in zip(layer, row, strict=True):
            x[n] = v - at / 2
    for it in range(16):
        for layer in (order if it % 2 == 0 else order[::-1]):
            if not layer:
                continue
            offsets, at = [], 0.0  # the least a node must sit right of the layer's first
            for i, n in enumerate(layer):
                at += (width[layer[i - 1]] + width[n]) / 2 + GAP if i else 0.0
                offsets.append(at)
            targets = []
            for n in layer:
                ns = (up[n] if it % 2 == 0 else down[n]) or up[n] + down[n]
                targets.append(sum(x[m] for m in ns) / len(ns) if ns else x[n])
            fitted = _isotonic([t - o for t, o in zip(targets, offsets, strict=True)])
            for n, f, o in zip(layer, fitted, offsets, strict=True):
                x[n] = f + o
    low = min(x[n] - width[n] / 2 for n in x) if x else 0.0
    return {n: v - low for n, v in x.items()}


def layered(layers: list[list[str]], edges: list[tuple[str, str]]) -> tuple[dict[str, tuple[int, float]],
                                                                             dict[int, list[tuple[int, float]]]]:
    """(node -> (layer, centre across in node widths), edge index -> its bend points (layer, across)). An edge
    within one layer or back up the layers (a cycle) gets no bends."""
    rank = {n: r for r, layer in enumerate(layers) for n in layer}
    order = [list(layer) for layer in layers]
    up: dict[str, list[str]] = defaultdict(list)
    down: dict[str, list[str]] = defaultdict(list)
    chains: dict[int, list[str]] = {}
    flipped: set[int] = set()  # edges back up the layers: their bends run the other way
    width = {n: 1.0 for n in rank}
    for k, (a, b) in enumerate(edges):
        if a not in rank or b not in rank or rank[a] == rank[b]:
            continue
        if rank[a] > rank[b]:
            a, b = b, a
            flipped.add(k)
        prev, chain = a, []
        for r in range(rank[a] + 1, rank[b]):
            d = f"\0{k}:{r}"
            order[r].append(d)
            chain.append(d)
            width[d] = BEND
            down[prev].append(d)
            up[d].append(prev)
            prev = d
        down[prev].append(b)
        up[b].append(prev)
        chains[k] = chain
    for r, layer in enumerate(order):  # dummies start beside the node they come from
        order[r] = sorted(layer, key=lambda n, r=r: _start(n, up, order, r))
    best, fewest = [list(x) for x in order], _crossings(order, down)
    for it in range(SWEEPS):
        if it % 2 == 0:
            _sweep(order, up, range(1, len(order)), -1)
        else:
            _sweep(order, down, range(len(order) - 2, -1, -1), 1)
        if (c := _crossings(order, down)) < fewest:
            best, fewest = [list(x) for x in order], c
        if fewest == 0:
            break
    x = _place(best, up, down, width)
    r_of = {n: r for r, layer in enumerate(best) for n in layer}
    nodes = {n: (r_of[n], x[n]) for n in rank}
    return nodes, {k: [(r_of[d], x[d]) for d in (chain[::-1] if k in flipped else chain)]
                   for k, chain in chains.items() if chain}


def _start(n: str, up: dict, order: list[list[str]], r: int) -> float:
    if r == 0 or not up[n]:
        return float(order[r].index(n))
    prev = {m: i for i, m in enumerate(order[r - 1])}
    ps = [prev[m] for m in up[n] if m in prev]
    return sum(ps) / len(ps) if ps else float(order[r].index(n))
