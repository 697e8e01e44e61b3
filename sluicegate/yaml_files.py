"""YAML for operators' files (gateway config, tenant seed, engine config): safe, and a key written twice is an error.

PyYAML keeps the last of two equal keys in a mapping without a word, so a second `limits:` or `redis_url:` pasted
lower in a file silently replaces the first. The loader here refuses it and names both lines. A merge (`<<: *base`)
may still be overridden by the mapping's own keys, as YAML intends.
"""

from __future__ import annotations

from typing import IO, Any

import yaml

_MERGE_TAG = "tag:yaml.org,2002:merge"


class _StrictLoader(yaml.SafeLoader):
    pass


def _construct_mapping(loader: _StrictLoader, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
    first_line: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == _MERGE_TAG:
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            seen = key in first_line
        except TypeError:  # an unhashable key: SafeLoader's own error says so below
            continue
        if seen:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping",
                node.start_mark,
                f"found duplicate key {key!r} (first on line {first_line[key] + 1})",
                key_node.start_mark,
            )
        first_line[key] = key_node.start_mark.line
    return yaml.SafeLoader.construct_mapping(loader, node, deep)


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def load_yaml(stream: str | IO[str]) -> Any:
    """yaml.safe_load, except that a duplicate key raises yaml.YAMLError (a ConstructorError naming both lines)."""
    return yaml.load(stream, Loader=_StrictLoader)  # noqa: S506 - _StrictLoader is a SafeLoader
