"""Shape YAML read with bounded work: data, and a map from field paths to lines.

A shape comes from a pull request, so its bytes are hostile until read: the
file's size, its nesting and its alias expansion are bounded before anything
is built, only the YAML core schema's tags are taken, and every refusal names
the line (a byte offset is turned into one). Nothing here is ever echoed back
at length: a quoted value is a short, escaped excerpt.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

from fakplan.errors import FakplanError, ShapeError
from fakplan.files import read_bounded

MAX_BYTES = 1 << 20  # a shape is a screenful of YAML; 1 MiB is thousands of them
MAX_DEPTH = 32  # the deepest shape block is 4 levels; nesting past this is not a shape
MAX_NODES = 20_000  # after expanding aliases: a large shape has a few hundred nodes
EXCERPT = 60  # characters of a value quoted back in an error

# the YAML 1.1 core tags SafeLoader resolves; any other (!!python/object, a local !tag)
# is refused, so no constructor beyond plain data ever runs
_CORE = "tag:yaml.org,2002:"
TAGS = frozenset(
    _CORE + name
    for name in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp", "merge")
)
# C0 controls (but tab, newline, carriage return), DEL, and the C1 block: a NUL in a value
# reaches bash as nothing and plan.json as \u0000 (the two would disagree)
_CONTROL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f\x80-\x9f]")
_SURROGATE = re.compile("[\ud800-\udfff]")
# libyaml's parser where PyYAML was built with it (its wheels are): the same events and
# nodes, several times faster than the pure-Python scanner
_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def excerpt(value: object) -> str:
    """A value as an error may quote it: its repr, escaped, cut to ``EXCERPT`` characters."""
    text = repr(value)
    return text if len(text) <= EXCERPT else text[: EXCERPT - 1] + "…"


class LineMap:
    """Field path -> line, from the YAML node tree (so errors can point at lines)."""

    def __init__(self, root: yaml.Node) -> None:
        self.root = root

    def line(self, path: tuple[str | int, ...]) -> int:
        node = self.root
        best = node.start_mark.line + 1
        for part in path:
            nxt: yaml.Node | None = None
            if isinstance(node, yaml.MappingNode):
                for key, value in node.value:
                    if isinstance(key, yaml.ScalarNode) and key.value == str(part):
                        best = key.start_mark.line + 1
                        nxt = value
                        break
            elif (
                isinstance(node, yaml.SequenceNode)
                and isinstance(part, int)
                and 0 <= part < len(node.value)
            ):
                nxt = node.value[part]
                best = nxt.start_mark.line + 1
            if nxt is None:
                return best
            node = nxt
        return best


def read_shape_file(path: Path) -> str:
    """The file's text: at most ``MAX_BYTES``, UTF-8, no control characters."""
    try:
        data = read_bounded(path, MAX_BYTES + 1, _Refused, "a shape file (.yaml)", head=True)
    except _Refused as exc:
        raise ShapeError(str(exc).removeprefix(f"{path}: "), file=path) from None
    if len(data) > MAX_BYTES:
        raise ShapeError(
            f"larger than {MAX_BYTES // 1024:,} KiB: a shape is a short YAML file", file=path
        )
    return decode(data, path)


class _Refused(FakplanError):
    """The bounded reader's refusal, re-raised as a ShapeError naming the file."""


def decode(data: bytes, path: Path) -> str:
    """UTF-8 text, or a refusal at the line of the first byte that is not."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise ShapeError(
            f"not UTF-8 text (byte 0x{data[exc.start]:02x}); save the shape as UTF-8",
            file=path,
            line=line,
        ) from None


def read_yaml(path: Path, text: str) -> tuple[dict[str, Any], LineMap]:
    """The shape's mapping and its line map; every refusal is a ``ShapeError`` at a line."""
    _refuse_characters(path, text)
    _bound_nesting(path, text)
    try:
        node = yaml.compose(text, Loader=_LOADER)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or "malformed YAML"
        raise ShapeError(
            f"malformed YAML: {problem}", file=path, line=mark.line + 1 if mark else None
        ) from None
    except yaml.YAMLError as exc:
        raise ShapeError(f"malformed YAML: {exc}", file=path) from None
    if node is None:
        raise ShapeError("the file is empty; a shape is a YAML mapping", file=path, line=1)
    _check_nodes(path, node)
    data = _construct(path, node)
    if not isinstance(data, dict):
        raise ShapeError(
            f"a shape is a YAML mapping of keys, got {type(data).__name__}",
            file=path,
            line=node.start_mark.line + 1,
        )
    return data, LineMap(node)


def _line_of(text: str, offset: int) -> int:
    return text.count("\n", 0, offset) + 1


def _refuse_characters(path: Path, text: str) -> None:
    surrogate = _SURROGATE.search(text)
    if surrogate:
        raise ShapeError(
            "a lone surrogate (\\ud800-\\udfff) is not text",
            file=path,
            line=_line_of(text, surrogate.start()),
        )
    found = _CONTROL.search(text)
    if found:
        raise ShapeError(
            f"control character U+{ord(found.group()):04X} in the text; a shape is plain "
            "text (tabs and newlines only)",
            file=path,
            line=_line_of(text, found.start()),
        )


def _too_deep(path: Path, line: int | None) -> ShapeError:
    return ShapeError(
        f"nested more than {MAX_DEPTH} levels deep: a shape is a few levels of keys",
        file=path,
        line=line,
    )


def _bound_nesting(path: Path, text: str) -> None:
    """Nesting checked on the parser's events, before the (recursive) composer runs."""
    depth = 0
    try:
        for event in yaml.parse(text, Loader=_LOADER):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_DEPTH:
                    raise _too_deep(path, event.start_mark.line + 1 if event.start_mark else None)
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        if "nesting depth" in str(exc.problem):  # libyaml's own bound, met while scanning ahead
            raise _too_deep(path, mark.line + 1 if mark else None) from None
        raise ShapeError(
            f"malformed YAML: {exc.problem or exc.context or 'malformed YAML'}",
            file=path,
            line=mark.line + 1 if mark else None,
        ) from None
    except yaml.YAMLError as exc:
        raise ShapeError(f"malformed YAML: {exc}", file=path) from None


def _check_nodes(path: Path, root: yaml.Node) -> None:
    """Tags, keys, repeated keys, surrogates and alias expansion, in one walk.

    Aliases make the node tree a graph: each node is checked once, and its size
    counted with every alias expanded, so a "billion laughs" is refused by arithmetic
    before anything is built; a node that contains itself is refused as a cycle."""
    sizes: dict[int, int] = {}
    open_nodes: set[int] = set()

    def refuse(message: str, node: yaml.Node) -> ShapeError:
        return ShapeError(message, file=path, line=node.start_mark.line + 1)

    def walk(node: yaml.Node) -> int:
        key = id(node)
        if key in sizes:
            return sizes[key]
        if key in open_nodes:
            raise refuse("an alias refers to a node that contains it (a cycle)", node)
        if node.tag not in TAGS:
            raise refuse(
                f"tag {excerpt(node.tag)} is not plain YAML data; a shape takes strings, "
                "numbers, booleans, lists and mappings only",
                node,
            )
        open_nodes.add(key)
        size = 1
        if isinstance(node, yaml.ScalarNode):
            if _SURROGATE.search(node.value):
                raise refuse("a lone surrogate (\\ud800-\\udfff) is not text", node)
            control = _CONTROL.search(node.value)
            if control:  # an escape such as "\0" in a quoted value
                raise refuse(
                    f"control character U+{ord(control.group()):04X} in a value; bash would "
                    "drop or split it while plan.json keeps it",
                    node,
                )
        elif isinstance(node, yaml.MappingNode):
            seen: set[str] = set()
            for name, value in node.value:
                if not isinstance(name, yaml.ScalarNode):
                    raise refuse("a key must be a plain value, not a list or mapping", name)
                if name.value in seen and name.tag != _CORE + "merge":
                    raise refuse(f"key {excerpt(name.value)} appears twice", name)
                seen.add(name.value)
                size += walk(name) + walk(value)
        elif isinstance(node, yaml.SequenceNode):
            size += sum(walk(item) for item in node.value)
        open_nodes.discard(key)
        if size > MAX_NODES:
            raise refuse(
                f"expands to more than {MAX_NODES:,} values (aliases repeat what they name); "
                "a shape is a few hundred",
                node,
            )
        sizes[key] = size
        return size

    walk(root)


def _construct(path: Path, root: yaml.Node) -> Any:
    """Plain data from the checked graph; a scalar its tag cannot read is refused at its line
    (``!!int 0x``, ``!!bool maybe``) instead of escaping as the constructor's exception."""
    loader = yaml.SafeLoader("")
    try:
        for node in _scalars(root):
            try:
                loader.construct_object(node, deep=True)
            except Exception:  # a core tag's constructor fails only on its value (!!int "")
                raise ShapeError(
                    f"{excerpt(node.value)} is not a valid {node.tag.removeprefix(_CORE)}",
                    file=path,
                    line=node.start_mark.line + 1,
                ) from None
        try:
            return loader.construct_document(root)
        except (ValueError, KeyError, TypeError, OverflowError, yaml.YAMLError) as exc:
            raise ShapeError(f"malformed YAML: {excerpt(str(exc))}", file=path) from None
    finally:
        loader.dispose()


def _scalars(root: yaml.Node) -> list[yaml.ScalarNode]:
    found: dict[int, yaml.ScalarNode] = {}
    stack = [root]
    seen: set[int] = set()
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        if isinstance(node, yaml.ScalarNode):
            found[id(node)] = node
        elif isinstance(node, yaml.MappingNode):
            stack.extend(part for pair in node.value for part in pair)
        elif isinstance(node, yaml.SequenceNode):
            stack.extend(node.value)
    return list(found.values())
