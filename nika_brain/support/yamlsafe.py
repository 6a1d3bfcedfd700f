"""Safe YAML: one loader and one dumper for every brain file.

The loader builds plain data straight from the parser's event stream (iterative, so deep nesting
cannot blow the C stack), and refuses what a state file never needs: anchors and aliases (billion
laughs), custom or exotic tags, merge keys, duplicate keys, more than one document, excessive size,
depth or node count. It records the line of every key so that validation errors can name it.
Timestamps stay strings: we never want a datetime that dumps back differently.

Most brain files are plain (block mappings, one-line scalars): `yamlfast` reads those, exactly as the
full loader would, without PyYAML, which is imported only for a file outside that subset or to write.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Generic, TypeVar

from nika_brain.errors import BrainError
from nika_brain.support import yamlfast
from nika_brain.support.fsio import read_text

MAX_BYTES = 1 << 20
T = TypeVar("T")
MAX_DEPTH = 32
MAX_NODES = 200_000

_STD = "tag:yaml.org,2002:"
_ALLOWED_EXPLICIT = {_STD + t for t in ("str", "int", "float", "bool", "null", "map", "seq", "timestamp")}
_Y: dict[str, Any] = {}


def _yaml() -> dict[str, Any]:
    """PyYAML and the objects built from it, made on first use."""
    if not _Y:
        import yaml
        from yaml.resolver import Resolver
        _Y.update(yaml=yaml, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader),
                  Dumper=getattr(yaml, "CSafeDumper", yaml.SafeDumper), resolver=Resolver(),
                  constructor=yaml.constructor.SafeConstructor(), ScalarNode=yaml.nodes.ScalarNode)
    return _Y


@dataclass(frozen=True)
class Doc:
    """Parsed YAML data plus the line (1-based) where each key path starts."""
    data: Any
    source: str
    lines: dict = field(default_factory=dict, compare=False, repr=False)

    def line(self, *path: Any) -> int | None:
        """Line of the deepest known prefix of `path` (a key that is missing points at its parent)."""
        p = tuple(path)
        while p:
            if p in self.lines:
                return self.lines[p]
            p = p[:-1]
        return self.lines.get((), None)

    def error(self, message: str, *path: Any) -> BrainError:
        key = ".".join(str(k) for k in path) if path else None
        return BrainError(message, file=self.source, line=self.line(*path), key=key)


_STR, _TS, _NULL, _BOOL, _INT, _FLOAT, _MERGE = (_STD + t for t in (
    "str", "timestamp", "null", "bool", "int", "float", "merge"))
_MAP, _SEQ = _STD + "map", _STD + "seq"


def _scalar(event: Any, err) -> Any:
    y = _yaml()
    yaml, ScalarNode = y["yaml"], y["ScalarNode"]
    tag = event.tag
    value = event.value
    if tag is None:
        tag = y["resolver"].resolve(ScalarNode, value, event.implicit)
    elif tag == "!":
        tag = _STR
    elif tag not in _ALLOWED_EXPLICIT:
        raise err(f"tag {tag!r} is not allowed")
    if tag == _STR or tag == _TS:
        return value
    if tag == _NULL:
        return None
    if tag == _BOOL:
        return value.lower() in ("true", "yes", "on", "y")
    node = ScalarNode(tag, value)
    try:
        if tag == _INT:
            return y["constructor"].construct_yaml_int(node)
        if tag == _FLOAT:
            return y["constructor"].construct_yaml_float(node)
    except (ValueError, yaml.YAMLError) as exc:
        raise err(f"bad {tag[len(_STD):]} value {value!r}") from exc
    if tag == _MERGE:
        raise err("merge keys (<<) are not allowed")
    raise err(f"tag {tag!r} is not allowed")


def loads(text: str, source: str = "<string>") -> Doc:
    """Parse one YAML document safely; raise BrainError naming source and line on any problem."""
    if len(text.encode("utf-8", "surrogatepass")) > MAX_BYTES:
        raise BrainError(f"file too large (over {MAX_BYTES} bytes)", file=source)
    fast = yamlfast.parse(text)
    if fast is not None:
        return Doc(fast[0], source, fast[1])
    y = _yaml()
    yaml = y["yaml"]
    from yaml import events as ev
    lines: dict[tuple, int] = {}
    root: list[Any] = []
    # Each frame: [container, path, pending_key_or_None, is_mapping]
    stack: list[list[Any]] = []
    nodes = 0
    docs = 0
    mark_line = 1

    def err(msg: str) -> BrainError:
        return BrainError(msg, file=source, line=mark_line)

    def attach(value: Any, line: int) -> tuple | None:
        """Put `value` into the current container; return the path it got (None for a key)."""
        if not stack:
            root.append(value)
            lines.setdefault((), line)
            return ()
        frame = stack[-1]
        container, path = frame[0], frame[1]
        if frame[3]:
            if frame[2] is _NOKEY:
                if isinstance(value, (dict, list)):
                    raise err("mapping keys must be scalars")
                if value in container or (value.__hash__ is None):
                    raise err(f"duplicate key {value!r}")
                frame[2] = value
                lines[path + (value,)] = line
                return None
            key = frame[2]
            container[key] = value
            frame[2] = _NOKEY
            return path + (key,)
        p = path + (len(container),)
        container.append(value)
        lines.setdefault(p, line)
        return p

    event: Any  # dispatched on type(event) below, which mypy does not narrow
    try:
        for event in yaml.parse(text, Loader=y["Loader"]):
            kind = type(event)
            if event.start_mark is not None:
                mark_line = event.start_mark.line + 1
            if kind is ev.ScalarEvent:
                if event.anchor is not None:
                    raise err("anchors (&name) are not allowed")
                nodes += 1
                if nodes > MAX_NODES:
                    raise err(f"too many nodes (over {MAX_NODES})")
                attach(_scalar(event, err), mark_line)
                continue
            if kind is ev.MappingEndEvent or kind is ev.SequenceEndEvent:
                stack.pop()
                continue
            if kind is ev.MappingStartEvent or kind is ev.SequenceStartEvent:
                if event.anchor is not None:
                    raise err("anchors (&name) are not allowed")
                nodes += 1
                if nodes > MAX_NODES:
                    raise err(f"too many nodes (over {MAX_NODES})")
                is_map = kind is ev.MappingStartEvent
                if event.tag not in (None, "!", _MAP if is_map else _SEQ):
                    raise err(f"tag {event.tag!r} is not allowed")
                if len(stack) >= MAX_DEPTH:
                    raise err(f"nesting deeper than {MAX_DEPTH} levels")
                container: Any = {} if is_map else []
                path = attach(container, mark_line)
                if path is None:
                    raise err("mapping keys must be scalars")
                stack.append([container, path, _NOKEY, is_map])
                continue
            if kind is ev.AliasEvent:
                raise err("aliases (*name) are not allowed")
            if kind is ev.DocumentStartEvent:
                docs += 1
                if docs > 1:
                    raise err("more than one YAML document")
            # StreamStart, StreamEnd, DocumentEnd: nothing to build
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        problem = str(exc.problem or exc.context)
        if "nesting depth" in problem:  # newer libyaml builds stop deep nesting themselves: same words
            raise BrainError(f"nesting deeper than {MAX_DEPTH} levels", file=source, line=line) from exc
        raise BrainError(f"invalid YAML: {problem}", file=source, line=line) from exc
    except yaml.YAMLError as exc:
        raise BrainError(f"invalid YAML: {str(exc).splitlines()[0]}", file=source) from exc
    except (UnicodeError, ValueError) as exc:
        raise BrainError(f"invalid YAML: {exc}", file=source, line=mark_line) from exc
    return Doc(root[0] if root else None, source, lines)


class _NoKey:
    __slots__ = ()


_NOKEY = _NoKey()


def load_doc(path: Path | str) -> Doc:
    path = Path(path)
    return loads(read_text(path, limit=MAX_BYTES), str(path))


class ByText(Generic[T]):
    """Records built from files, given again while a file holds the same text: a transition reads its
    run and its claim several times (the orchestrator, the close, the index), a launch KERNEL.md and
    the step's card at every step. The file is read every time and its text compared: the same bytes
    give the same record, whoever wrote them and whenever (no stat, no clock); a text that does not
    build raises each time, never remembered. The records are frozen dataclasses; their mappings are
    never changed in place by their readers."""

    def __init__(self, build: Callable[[Path, str], T], keep: int = 512):
        self._build = build
        self._keep = keep
        self._seen: dict[str, tuple[str, T]] = {}

    def load(self, path: Path) -> T:
        key = str(path)
        text = read_text(path, limit=MAX_BYTES)
        hit = self._seen.get(key)
        if hit is not None and hit[0] == text:
            return hit[1]
        record = self._build(path, text)
        if len(self._seen) >= self._keep:
            self._seen.clear()
        self._seen[key] = (text, record)
        return record


class Parsed(ByText[T]):
    """ByText for a YAML file: `build` gets its parsed document."""

    def __init__(self, build: Callable[[Path, Doc], T], keep: int = 512):
        super().__init__(lambda path, text: build(path, loads(text, str(path))), keep)


def load_file(path: Path | str) -> Any:
    """Plain data from a YAML file (see `loads` for what is refused)."""
    return load_doc(path).data


def _stable_dumper() -> Any:
    y = _yaml()
    if "StableDumper" not in y:
        base: Any = y["Dumper"]

        class _StableDumper(base):
            # Never emit &id001/*id001 for shared objects: our own loader refuses them.
            def ignore_aliases(self, data: Any) -> bool:  # noqa: ARG002 (PyYAML's signature)
                return True
        y["StableDumper"] = _StableDumper
    return y["StableDumper"]


def dumps(data: Any) -> str:
    """Deterministic YAML: insertion order kept (callers build dicts in schema order), block style."""
    return _yaml()["yaml"].dump(data, Dumper=_stable_dumper(), sort_keys=False, default_flow_style=False,
                                allow_unicode=True, width=4096)


# Every acquire writes a lock file, every step of a run its run and claim files, and yaml.dump costs as
# much as the rest of the write (its representer is Python even with the C emitter). These files hold
# identifiers, times, integers, short texts, nested mappings and lists of them, whose text `dumps` we
# can predict exactly; anything else (quotes, '#', ': ', unicode, line breaks, floats, a list in a
# list...) goes through `dumps`. Tests hold the two to byte equality.
_PLAIN = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9_./:-]*[A-Za-z0-9_./-])?\Z")
# Words of those characters and a few more that a plain scalar may hold in block style, one space
# apart, none ending with ':' (": " would start a value).
_CHAR = r"[A-Za-z0-9_./,;()+=-]"
_WORDS = re.compile(rf"[A-Za-z0-9_]{_CHAR}*(?::{_CHAR}+)*(?: {_CHAR}+(?::{_CHAR}+)*)*\Z")
_STR_TAG = "tag:yaml.org,2002:str"
_LINE = 4000   # below dumps' width (4096): no line of ours is ever folded


def plain_scalar(value: object) -> str | None:
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    if isinstance(value, str) and _PLAIN.match(value):
        return _unless_typed(value)
    return None


_TYPED: dict[str, str] = {}   # the resolver's answers: a run's files repeat the same ids, steps and actions


def _unless_typed(value: str) -> str:
    # A string that would read back as another type (a time, a number, a bool) is single-quoted. YAML
    # 1.1 types a plain scalar only when its first character may start one (yamlfast's two sets).
    if value[0] not in yamlfast.RESOLVED_FIRST:
        return value
    text = _TYPED.get(value)
    if text is None:
        y = _yaml()
        plain = y["resolver"].resolve(y["ScalarNode"], value, (True, False)) == _STR_TAG
        text = value if plain else f"'{value}'"
        if len(_TYPED) >= 4096:
            _TYPED.clear()
        _TYPED[value] = text
    return text


def _scalar_text(value: object) -> str | None:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        if not value:
            return "''"
        if _PLAIN.match(value) or (len(value) < _LINE and _WORDS.match(value)):
            return _unless_typed(value)
    return None


def _mapping_lines(data: dict, indent: str, out: list[str]) -> bool:
    for key, value in data.items():
        if not isinstance(key, str) or len(key) > 100 or plain_scalar(key) != key:
            return False
        if isinstance(value, dict) and value:
            out.append(f"{indent}{key}:\n")
            if not _mapping_lines(value, indent + "  ", out):
                return False
        elif isinstance(value, list) and value:
            out.append(f"{indent}{key}:\n")
            if not _sequence_lines(value, indent, out):   # block sequences in a mapping are indentless
                return False
        else:
            text = "{}" if isinstance(value, dict) else "[]" if isinstance(value, list) else _scalar_text(value)
            if text is None or len(indent) + len(key) + len(text) > _LINE:
                return False
            out.append(f"{indent}{key}: {text}\n")
    return True


def _sequence_lines(items: list, indent: str, out: list[str]) -> bool:
    for item in items:
        if isinstance(item, dict) and item:
            lines: list[str] = []
            if not _mapping_lines(item, indent + "  ", lines):
                return False
            lines[0] = f"{indent}- {lines[0][len(indent) + 2:]}"   # the item's first key on its dash
            out += lines
            continue
        if isinstance(item, (dict, list)):
            return False   # `- {}`, `- []`, `- - x`: rare, the full dumper's
        text = _scalar_text(item)
        if text is None or len(indent) + len(text) > _LINE:
            return False
        out.append(f"{indent}- {text}\n")
    return True


def dump_plain(data: dict) -> str | None:
    """`dumps(data)` for a non-empty mapping of the scalars above, mappings and lists of them, else None."""
    if not isinstance(data, dict) or not data:
        return None
    out: list[str] = []
    return "".join(out) if _mapping_lines(data, "", out) else None


def dumps_fast(data: dict) -> str:
    """`dumps(data)`, byte for byte, without yaml.dump for the mappings `dump_plain` writes."""
    fast = dump_plain(data)
    return dumps(data) if fast is None else fast
