"""Reading user YAML safely, with one-line errors that name the file, never its content:
a size cap, UTF-8, and a safe loader that refuses deep nesting, alias bombs, recursive
aliases and huge integers before they cost memory or time (:mod:`parcat.core.limits`)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from parcat.core.errors import UsageError, clip
from parcat.core.limits import MAX_NUMBER_DIGITS, MAX_YAML_BYTES, MAX_YAML_DEPTH, MAX_YAML_NODES
from parcat.core.readfile import read_regular


class YAMLLimitError(yaml.YAMLError):
    """A YAML document is valid but over one of parcat's limits; the message says which."""


class _LimitedLoader(yaml.SafeLoader):
    """``SafeLoader`` that stops composing past :data:`MAX_YAML_DEPTH` (before the composer's
    own recursion overflows) and refuses integers longer than :data:`MAX_NUMBER_DIGITS`."""

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent: Node | None, index: Any) -> Node | None:
        self._depth += 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise YAMLLimitError(f"line {mark.line + 1}: nested more than "
                                     f"{MAX_YAML_DEPTH} levels deep (the limit)")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_yaml_int(self, node: ScalarNode) -> int:
        text = str(node.value)
        if len(text) > MAX_NUMBER_DIGITS:
            raise YAMLLimitError(f"line {node.start_mark.line + 1}: an integer of {len(text):,} "
                                 f"characters (the limit is {MAX_NUMBER_DIGITS})")
        return super().construct_yaml_int(node)


_LimitedLoader.add_constructor("tag:yaml.org,2002:int", _LimitedLoader.construct_yaml_int)
# 1e-4 is a float, as in YAML 1.2 and JSON (a learning rate written by json.dumps reads back
# as 5e-05); PyYAML's YAML 1.1 rules want a dot in it and would keep it text
_LimitedLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)[eE][-+]?[0-9]+$"),
    list("-+0123456789."))


def _children(node: Node) -> list[Node]:
    if isinstance(node, SequenceNode):
        return list(node.value)
    if isinstance(node, MappingNode):
        return [part for pair in node.value for part in pair]
    return []


def _measure(node: Node, depth: int, seen: dict[int, tuple[int, int]], open_: set[int]) -> int:
    """Count the values under ``node`` with aliases expanded, checking depth and size;
    ``seen`` memoises (values, height) per node, ``open_`` finds an alias in its own anchor."""
    key = id(node)
    if key in open_:
        raise YAMLLimitError(f"line {node.start_mark.line + 1}: an alias refers to a value "
                             "that contains it (a recursive structure)")
    if key not in seen:
        open_.add(key)
        count, height = 1, 0
        for child in _children(node):
            child_count = _measure(child, depth + 1, seen, open_)
            count += child_count
            height = max(height, 1 + seen[id(child)][1])
            if count > MAX_YAML_NODES:
                raise YAMLLimitError(f"more than {MAX_YAML_NODES:,} values once aliases are "
                                     "expanded (the limit; an alias bomb?)")
        open_.discard(key)
        seen[key] = (count, height)
    count, height = seen[key]
    if depth + height > MAX_YAML_DEPTH:
        raise YAMLLimitError(f"line {node.start_mark.line + 1}: nested more than "
                             f"{MAX_YAML_DEPTH} levels deep once aliases are expanded (the limit)")
    return count


def load_yaml(text: str) -> Any:
    """The document in ``text``, loaded safely within parcat's limits (``yaml.YAMLError``,
    or :class:`YAMLLimitError` past a limit)."""
    loader = _LimitedLoader(text)
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _measure(node, 1, {}, set())
        return loader.construct_document(node)
    except (ValueError, OverflowError) as exc:  # a scalar the constructor cannot convert
        raise YAMLLimitError(f"a value cannot be read: {clip(str(exc))}") from exc
    finally:
        loader.dispose()


def read_text(path: Path, label: str, error: type[UsageError]) -> str:
    """The UTF-8 text of a user file of at most :data:`MAX_YAML_BYTES` bytes; ``error``
    for a missing, unreadable, too large or non-UTF-8 one."""
    try:
        data = read_regular(path, MAX_YAML_BYTES)
    except FileNotFoundError:
        raise error(f"{label} does not exist") from None
    except OSError as exc:
        raise error(f"{label}: {exc.strerror or type(exc).__name__}") from exc
    except ValueError as exc:  # a NUL byte in the path
        raise error(f"{label}: not a valid path ({exc})") from exc
    if len(data) > MAX_YAML_BYTES:
        raise error(f"{label} is larger than {MAX_YAML_BYTES // 1024} KiB (the limit for a "
                    "YAML file); is it the right file?")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error(f"{label} is not UTF-8 text (byte {exc.start:,} cannot be decoded); "
                    "is it a binary file? save it as UTF-8") from exc


def read_yaml_mapping(path: Path, label: str, error: type[UsageError]) -> dict[str, Any]:
    """The mapping in a YAML file (empty for an empty file). ``error`` (``MissionError``,
    ...) names the file as ``label`` and the line, for any file that is not such a mapping."""
    text = read_text(path, label, error)
    try:
        loaded = load_yaml(text)
    except YAMLLimitError as exc:
        raise error(f"{label}: {exc}") from exc
    except yaml.YAMLError as exc:
        raise error(f"{label}{_where(exc)}: invalid YAML ({_problem(exc)})") from exc
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise error(f"{label}: expected a mapping of keys, got {type(loaded).__name__}")
    return loaded


def _where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f" line {mark.line + 1}" if mark is not None else ""


def _problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError):
        return f"character {exc.position:,} is a control character YAML does not allow"
    problem = getattr(exc, "problem", None) or "invalid YAML"
    return clip(" ".join(str(problem).split()))

