"""Protobuf text format (what Triton's config.pbtxt is) from plain Python values, and its top-level scalar fields
read back.

Messages are dicts, repeated fields lists, enum values `Enum("TYPE_FP32")`; strings are quoted and escaped.
Writing text directly keeps the protobuf package off the run-time path; the tests parse the result with
Triton's own ModelConfig message, so a field this writer gets wrong fails there."""
from __future__ import annotations

import ast
import json
import re

# the text format's tokens: a quoted string (either quote), a comment, a brace, or a bare word
_TOKEN = re.compile(r'"(?:[^"\\\n]|\\.)*"|\'(?:[^\'\\\n]|\\.)*\'|#[^\n]*|[{}<>\[\]]|[^\s{}<>\[\]:,;"\'#]+')


class Enum(str):
    """An enum value: written bare (TYPE_FP32), not quoted."""


def _scalar(value) -> str:
    if isinstance(value, Enum):
        return str(value)
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, str):
        # UTF-8 as is (JSON's \\u escape of an emoji is a surrogate pair, which Triton's protobuf refuses); the
        # remaining JSON escapes (quote, backslash, control characters) are valid text-format escapes
        return json.dumps(value, ensure_ascii=False)
    raise TypeError(f"cannot write {type(value).__name__} as a protobuf text value")


def _field(name: str, value, indent: str) -> list[str]:
    if isinstance(value, dict):
        return [f"{indent}{name} {{", *_message(value, indent + "  "), f"{indent}}}"]
    if isinstance(value, list):
        if all(not isinstance(v, dict) for v in value):
            return [f"{indent}{name}: [{', '.join(_scalar(v) for v in value)}]"]
        return [line for v in value for line in _field(name, v, indent)]
    return [f"{indent}{name}: {_scalar(value)}"]


def _message(fields: dict, indent: str = "") -> list[str]:
    return [line for name, value in fields.items() if value not in (None, [], {})
            for line in _field(name, value, indent)]


def dumps(config: dict) -> str:
    return "\n".join(_message(config)) + "\n"


def top_level(text: str) -> dict[str, str]:
    """The scalar fields of the outermost message (name, backend, platform, max_batch_size, ...), strings unquoted;
    nested messages and lists are skipped, comments ignored."""
    fields, depth, name = {}, 0, None
    for tok in _TOKEN.findall(text):
        if tok.startswith("#"):
            continue
        if tok in "{<[":
            depth, name = depth + 1, None
        elif tok in "}>]":
            depth -= 1
        elif depth == 0 and name is None:
            name = tok
        elif depth == 0:
            fields.setdefault(name, ast.literal_eval(tok) if tok[0] in "\"'" else tok)
            name = None
    return fields
