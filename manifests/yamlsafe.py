"""User text into YAML by the YAML emitter, never by splicing; what YAML cannot carry is refused.

Why: a training program spliced into a ``|`` block broke the manifest when its first line was
indented, and NEL, U+2028/U+2029, VT and FF became line breaks inside string literals (changed
without a word). Every value now goes through PyYAML's emitter as one double-quoted scalar (its
escapes keep newlines, tabs and non-ASCII exact), and characters a manifest should not carry are
refused with exit 2 before anything is written:

- C0 controls other than tab, newline and carriage return (NUL, ESC of ANSI colour codes, VT, FF, ...)
  and DEL: not printable in YAML (YAML 1.2 section 5.1, c-printable) and never meant in a manifest;
- C1 controls (U+0080-U+009F, NEL among them), U+2028 and U+2029: YAML 1.1 readers take them for
  line breaks;
- lone surrogates and the non-characters U+FFFE/U+FFFF: not text at all.
"""

from __future__ import annotations

import unicodedata
from typing import Any

from hpq.errors import UsageError

_ALLOWED_CONTROLS = {"\t", "\n", "\r"}


def _refused(ch: str) -> bool:
    code = ord(ch)
    if code < 0x20:
        return ch not in _ALLOWED_CONTROLS
    return (code == 0x7F or 0x80 <= code <= 0x9F or code in (0x2028, 0x2029, 0xFFFE, 0xFFFF)
            or 0xD800 <= code <= 0xDFFF)


def first_refused(text: str) -> tuple[int, str] | None:
    """(index, character) of the first character a manifest may not carry, or None."""
    for index, ch in enumerate(text):
        if _refused(ch):
            return index, ch
    return None


def describe(ch: str) -> str:
    name = unicodedata.name(ch, "") or {0x85: "NEL"}.get(ord(ch), "a control character")
    return f"U+{ord(ch):04X} ({name})"


def check(text: str, what: str) -> str:
    """``text`` unchanged, or a usage error naming the first character YAML cannot carry and where."""
    found = first_refused(text)
    if found is not None:
        index, ch = found
        line = text.count("\n", 0, index) + 1
        column = index - (text.rfind("\n", 0, index) + 1) + 1
        raise UsageError(f"{what} holds {describe(ch)} at line {line}, column {column}: a Kubernetes manifest "
                         "cannot carry it faithfully; remove it")
    return text


def scalar(value: Any, what: str = "a manifest value") -> str:
    """``value`` as one YAML flow scalar: strings double-quoted by PyYAML's emitter, numbers and
    booleans as JSON writes them (valid YAML, read back as the same type)."""
    import json

    if not isinstance(value, str):
        return json.dumps(value)
    import yaml

    check(value, what)
    text = yaml.safe_dump(value, default_style='"', allow_unicode=True, width=1 << 30, explicit_end=False)
    return text[:-1] if text.endswith("\n") else text


def block_mapping(values: dict[str, str], indent: int, what: str = "a manifest value") -> str:
    """A mapping of (multi-line) strings as YAML lines indented by ``indent``, made by PyYAML's emitter.

    Multi-line strings become literal blocks (readable source in a ConfigMap); PyYAML adds an
    explicit indentation indicator when a text starts with spaces and falls back to a quoted scalar
    for what a block cannot hold. The result is read back and must equal the input exactly.
    """
    import yaml

    for key, text in values.items():
        check(key, what)
        check(text, what)

    class Dumper(yaml.SafeDumper):
        pass

    def text_style(dumper: yaml.SafeDumper, data: str) -> Any:
        # A literal block whose text ends in blank lines needs "keep" chomping (|+), and the emitter then closes
        # the document with "..." - a marker that means nothing (or breaks the YAML) once the lines are
        # embedded in a manifest. Such texts, and texts of newlines only, are double-quoted instead.
        trailing = len(data) - len(data.rstrip("\n"))
        literal = "\n" in data and trailing <= 1 and data.strip("\n") != ""
        return dumper.represent_scalar("tag:yaml.org,2002:str", data,
                                       style="|" if literal else ('"' if "\n" in data else None))

    Dumper.add_representer(str, text_style)
    text = yaml.dump(values, Dumper=Dumper, allow_unicode=True, width=1 << 30, sort_keys=True,
                     default_flow_style=False)
    if yaml.safe_load(text) != values:  # never changed silently
        raise UsageError(f"{what} does not survive YAML unchanged; remove unusual characters")
    return "\n".join(" " * indent + line if line else line for line in text.rstrip("\n").split("\n"))
