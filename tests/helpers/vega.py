"""Reading a Vega-Lite (altair) chart in tests: the chart is checked against the Vega-Lite schema, then each
layer is given as its mark, its own rows and its encoding."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pandas as pd


@dataclass
class Layer:
    mark: dict
    data: pd.DataFrame
    encoding: dict


def layers(chart: Any) -> list[Layer]:
    chart.to_dict()  # validates the whole chart: a spec the browser would reject fails here
    out = []
    for layer in getattr(chart, "layer", None) or [chart]:  # a single chart is its own one layer
        spec = layer.to_dict(validate=False)
        mark = spec["mark"] if isinstance(spec["mark"], dict) else {"type": spec["mark"]}
        data = layer.data if isinstance(layer.data, pd.DataFrame) else chart.data
        out.append(Layer(mark, data, spec.get("encoding", {})))
    return out


def legend(chart: Any, channel: str = "color") -> dict[str, Any]:
    """A named-series channel's legend as {series: colour or shape}, from the first layer that encodes it."""
    enc = next(la.encoding[channel] for la in layers(chart) if channel in la.encoding)
    return dict(zip(enc["scale"]["domain"], enc["scale"]["range"], strict=True))


def app_charts(at: Any) -> list[dict]:
    """The Vega-Lite charts a Streamlit AppTest run drew, as {"title", "layers": [Layer, ...]}: each layer's mark,
    encoding and rows (Streamlit sends the rows apart from the spec, as Arrow datasets)."""
    import json

    from streamlit import dataframe_util

    out = []
    for e in at.get("vega_lite_chart"):
        spec = json.loads(e.proto.spec)
        data = {d.name: dataframe_util.convert_arrow_bytes_to_pandas_df(d.data.data) for d in e.proto.datasets}
        found = []
        for layer in spec.get("layer") or [spec]:
            mark = layer["mark"] if isinstance(layer["mark"], dict) else {"type": layer["mark"]}
            name = (layer.get("data") or spec.get("data") or {}).get("name")
            found.append(Layer(mark, data.get(name, pd.DataFrame()), layer.get("encoding", {})))
        title = spec.get("title")
        out.append({"title": title.get("text") if isinstance(title, dict) else title, "layers": found})
    return out


def series_names(chart: dict) -> list[str]:
    """The named series an app chart's legend lists."""
    enc = next(la.encoding["color"] for la in chart["layers"] if "color" in la.encoding
               and "scale" in la.encoding["color"])
    return list(enc["scale"]["domain"])
