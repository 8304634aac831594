"""Shape and edge data (``A@{ shape: rect, label: "x" }``) read as Mermaid reads it: js-yaml's ``load`` with its
JSON schema, here PyYAML's safe loader narrowed to the same schema.

What the narrowing changes from PyYAML's YAML 1.1 defaults, each as js-yaml's JSON_SCHEMA does it: only
``true``/``false`` (three spellings each) are booleans and only ``null``/``~``/empty is null (``yes``, ``on`` stay
text); no timestamps, sexagesimal numbers, ``<<`` merges or ``=`` values; integers in decimal (``_`` allowed),
``0b``, ``0o`` and ``0x``; a key written twice is an error; keys are JavaScript object keys (text). PyYAML is
imported only when a text has shape data.
"""

from __future__ import annotations

import re

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

_INT = re.compile(r"[-+]?(?:0b[01_]+|0o[0-7_]+|0x[0-9a-fA-F_]+|[0-9][0-9_]*)")
_FLOAT = re.compile(r"[-+]?(?:[0-9][0-9_]*)(?:\.[0-9_]*)?(?:[eE][-+]?[0-9]+)?|\.[0-9_]+(?:[eE][-+]?[0-9]+)?"
                    r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)")
_LOADER = None


class YamlDataError(ValueError):
    """The text is not YAML js-yaml would load."""


def _js_key(k: Any) -> str:
    if k is True:
        return "true"
    if k is False:
        return "false"
    if k is None:
        return "null"
    if isinstance(k, float) and k.is_integer():
        return str(int(k))
    return str(k)


def _loader():
    global _LOADER
    if _LOADER is not None:
        return _LOADER
    import yaml

    class JsonSchemaLoader(yaml.SafeLoader):
        pass

    JsonSchemaLoader.yaml_implicit_resolvers = {}
    JsonSchemaLoader.add_implicit_resolver("tag:yaml.org,2002:null", re.compile(r"^(?:~|null|Null|NULL|)$"),
                                           ["~", "n", "N", ""])
    JsonSchemaLoader.add_implicit_resolver("tag:yaml.org,2002:bool",
                                           re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF"))
    JsonSchemaLoader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(f"^(?:{_INT.pattern})$"),
                                           list("-+0123456789"))
    JsonSchemaLoader.add_implicit_resolver("tag:yaml.org,2002:float", re.compile(f"^(?:{_FLOAT.pattern})$"),
                                           list("-+0123456789."))

    def construct_int(loader, node) -> int:
        raw = loader.construct_scalar(node)
        if raw.endswith("_"):
            return raw  # js-yaml: not an integer
        sign = -1 if raw.startswith("-") else 1
        body = raw.lstrip("+-").replace("_", "")
        for prefix, base in (("0b", 2), ("0o", 8), ("0x", 16)):
            if body.startswith(prefix):
                return sign * int(body[2:], base)
        return sign * int(body)

    def construct_float(loader, node) -> float:
        raw = loader.construct_scalar(node).replace("_", "")
        low = raw.lower()
        if low.endswith(".inf"):
            return float("-inf") if raw.startswith("-") else float("inf")
        if low == ".nan":
            return float("nan")
        return float(raw)

    def construct_mapping(loader, node, deep=False) -> dict:
        if not isinstance(node, yaml.MappingNode):
            raise yaml.constructor.ConstructorError(None, None, "expected a mapping", node.start_mark)
        out: dict = {}
        for key_node, value_node in node.value:
            key = _js_key(loader.construct_object(key_node, deep=True))
            if key in out:
                raise yaml.constructor.ConstructorError(None, None, f"duplicated mapping key '{key}'",
                                                        key_node.start_mark)
            out[key] = loader.construct_object(value_node, deep=deep)
        return out

    def construct_map(loader, node):
        data: dict = {}
        yield data
        data.update(construct_mapping(loader, node))

    JsonSchemaLoader.add_constructor("tag:yaml.org,2002:int", construct_int)
    JsonSchemaLoader.add_constructor("tag:yaml.org,2002:float", construct_float)
    JsonSchemaLoader.add_constructor("tag:yaml.org,2002:map", construct_map)
    JsonSchemaLoader.construct_mapping = construct_mapping
    _LOADER = JsonSchemaLoader
    return _LOADER


def load(doc: str) -> Any:
    """The document as js-yaml's ``load(doc, {schema: JSON_SCHEMA})`` gives it; YamlDataError when it would throw."""
    loader = _loader()
    import yaml

    try:
        return yaml.load(doc, Loader=loader)  # noqa: S506 - a safe loader narrowed further (no object tags)
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise YamlDataError(problem) from None
    except (ValueError, RecursionError) as exc:
        raise YamlDataError(str(exc)[:200]) from None
