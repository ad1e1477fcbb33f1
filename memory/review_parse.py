"""Reading the reviewer model's answer: from whatever text a real model writes to exact operations.

Small local models and hosted ones alike wrap the operations we ask for in many shapes: a ```json fence
(or a bare fence, or `~~~`), a top-level list, one operation object, the list under another key
(`ops`, `memories`, `actions`, `result.operations`), prose before or after it, `//` comments, trailing
commas, Python-style single quotes; or they say "Nothing to save" in a dozen ways. `parse_output` reads
every one of those shapes (the corpus in `tests/memory/reviewer/corpus.py` holds one answer of each, with
what it must give); `read_op` then turns each item into an `Op` with the names we use, or refuses it with a
code and a reason, which the run records. Nothing is dropped silently.
"""

from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import dataclass, field

from memory.duplicates import words
from memory.models import Category
from memory.rows import MemoryRowError

NOTHING_TO_SAVE = "Nothing to save."
OPS = ("add", "replace", "archive")
OP_NAMES = {
    **dict.fromkeys(("add", "create", "insert", "new", "store", "save", "remember"), "add"),
    **dict.fromkeys(("replace", "update", "edit", "modify", "correct", "change"), "replace"),
    **dict.fromkeys(("archive", "delete", "remove", "forget"), "archive"),
}
OP_FIELDS = ("op", "action", "operation", "type")
LIST_FIELDS = ("operations", "ops", "memory_operations", "actions", "changes", "updates", "memories",
               "memory", "items", "facts", "result", "results", "data", "response", "output")
VALUE_FIELDS = ("value", "fact", "text", "content", "memory", "new_value")
ID_FIELDS = ("id", "memory_id", "row_id", "target_id")
MESSAGE_FIELDS = ("message_ids", "source_message_ids", "source_ids", "sources", "message_id",
                  "source_message_id", "source", "from_messages", "evidence")
CATEGORY_FIELDS = ("category", "section", "cat", "type", "kind")
CATEGORY_NAMES = {
    **{c: c for c in Category.values},
    "identities": "identity", "preferences": "preference", "interests": "interest", "goals": "goal",
    "directives": "directive", "working rules": "directive", "working rule": "directive", "rules": "directive",
    "rule": "directive", "contexts": "context",
}
MAX_TRIES = 200  # JSON starts tried in one answer; a real answer has its JSON in the first few
MAX_ANSWER_CHARS = 40_000  # ten times what the reviewer's output token cap lets a model write

# Code names of what `read_op` refuses (recorded per operation, counted per run and per day).
MALFORMED, UNKNOWN_OP, INVALID_CATEGORY, MISSING_CATEGORY = "malformed", "unknown_op", "invalid_category", \
    "missing_category"
# Notes on an operation that was read and applied with a repair.
KEY_DERIVED, CATEGORY_INFERRED, OP_INFERRED = "key_derived", "category_inferred", "op_inferred"


class UnparseableOutput(ValueError):
    """The model answered neither operations nor `Nothing to save.`"""


NOTHING = re.compile(
    r"\b(nothing\s+(new\s+|else\s+)?(worth\s+(saving|storing|remembering)|to\s+(save|store|remember|add|update))"
    r"|no\s+(new\s+)?(durable\s+|memorable\s+|lasting\s+)?(facts?|memories|information|operations|changes|updates)"
    r"(\s+(worth\s+\w+|to\s+(save|store|remember|add)))?"
    r"|nothing_to_save)\b", re.IGNORECASE)
FENCE = re.compile(r"(?:```|~~~)[ \t]*[A-Za-z0-9_+-]*[ \t]*\n?(.*?)(?:```|~~~)", re.DOTALL)
JSON_WORDS = {"true": "True", "false": "False", "null": "None"}


def parse_output(text: str) -> list | None:
    """The operations the model proposed (each item raw), or None for nothing to save.

    Raises UnparseableOutput when the answer holds neither.
    """
    stripped = (text or "").strip()[:MAX_ANSWER_CHARS]
    candidates = [m.group(1) for m in FENCE.finditer(stripped)] + [stripped]
    for candidate in candidates:
        found = _first_operations(candidate)
        if found is not None:
            return found or None  # an empty list says there is nothing to save
    if NOTHING.search(stripped[:400]):
        return None
    raise UnparseableOutput(f"the model answered neither operations nor '{NOTHING_TO_SAVE}': {stripped[:200]!r}")


def _first_operations(text: str) -> list | None:
    starts = [i for i, ch in enumerate(text) if ch in "[{"][:MAX_TRIES]
    for start in starts:
        value = _decode_at(text, start)
        if value is not None:
            operations = _operations(value)
            if operations is not None:
                return operations
    return None


def _decode_at(text: str, start: int):
    """The JSON value (or JSON-like: comments, trailing commas, single quotes) starting at `start`."""
    try:
        return json.JSONDecoder().raw_decode(text, start)[0]
    except json.JSONDecodeError:
        pass
    segment = _balanced(text, start)
    if segment is None:
        return None
    cleaned = _cleaned(segment)
    for attempt in (lambda: json.loads(cleaned), lambda: ast.literal_eval(_python_literals(cleaned))):
        try:
            return attempt()
        except (ValueError, SyntaxError, RecursionError, MemoryError, TypeError):
            continue
    return None


def _balanced(text: str, start: int) -> str | None:
    """The bracketed span from `start` to its closing bracket, quotes of either kind respected."""
    depth, quote, escaped = 0, "", False
    for index in range(start, len(text)):
        ch = text[index]
        if quote:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == quote:
                quote = ""
        elif ch in "\"'":
            quote = ch
        elif ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
            if depth == 0:
                return text[start:index + 1]
    return None


STRING = r"\"(?:\\.|[^\"\\])*\"|'(?:\\.|[^'\\])*'"
COMMENT_OR_STRING = re.compile(rf"({STRING})|//[^\n]*|/\*.*?\*/|#[^\n]*", re.DOTALL)


def _cleaned(segment: str) -> str:
    """`//`, `/* */` and `#` comments and trailing commas removed, outside strings."""
    uncommented = COMMENT_OR_STRING.sub(lambda m: m.group(1) or "", segment)
    return re.sub(r",(\s*[\]}])", r"\1", uncommented)


def _python_literals(text: str) -> str:
    """JSON's true/false/null as Python's, outside strings, for `ast.literal_eval`."""
    parts = re.split(f"({STRING})", text)
    return "".join(part if i % 2 else re.sub(r"\b(true|false|null)\b", lambda m: JSON_WORDS[m.group(1)], part)
                   for i, part in enumerate(parts))


def _is_op(value) -> bool:
    return isinstance(value, dict) and any(str(value.get(f, "")).strip().lower() in OP_NAMES for f in OP_FIELDS)


def _operations(value, depth: int = 0) -> list | None:
    """The list of operations inside a decoded value, or None when it holds none."""
    if isinstance(value, list):
        return value if not value or any(isinstance(item, dict) for item in value) else None
    if not isinstance(value, dict) or depth > 2:
        return None
    if _is_op(value):
        return [value]
    lowered = {str(k).lower(): v for k, v in value.items()}
    for name in LIST_FIELDS:
        if name in lowered:
            found = _operations(lowered[name], depth + 1)
            if found is not None:
                return found
    for item in value.values():
        if isinstance(item, list) and any(_is_op(op) for op in item):
            return item
    return None


@dataclass
class Op:
    """One operation as the reviewer applies it, with the notes of what was repaired to read it."""

    op: str
    category: str | None = None
    key: str = ""
    value: str | None = None
    memory_id: int | None = None
    reason: str = ""
    message_ids: list = field(default_factory=list)  # as the model gave them; checked against the batch
    notes: list = field(default_factory=list)  # [{"code": …, "detail": …}]

    def note(self, code: str, detail: str) -> None:
        self.notes.append({"code": code, "detail": detail})


def op_name(raw) -> str:
    """The operation's name as the model wrote it (for the run's record, whatever it is)."""
    if not isinstance(raw, dict):
        return ""
    for name in OP_FIELDS:
        value = raw.get(name)
        if isinstance(value, str) and value.strip().lower() in OP_NAMES:
            return value.strip().lower()
    value = raw.get("op") or raw.get("action")
    return str(value).strip().lower() if value else ""


def _lowered(raw: dict) -> dict:
    return {str(k).strip().lower(): v for k, v in raw.items()}


def _first(raw: dict, names) -> object:
    return next((raw[n] for n in names if raw.get(n) not in (None, "")), None)


def _row_id(value) -> int:
    if isinstance(value, bool):
        raise MemoryRowError(MALFORMED, f"id {value!r} is not a row id")
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str) and re.fullmatch(r"\s*#?\s*\d{1,18}\s*", value):
        return int(value.strip().lstrip("#"))
    raise MemoryRowError(MALFORMED, f"id {value!r} is not a row id")


def message_ids_of(value) -> list:
    """The message ids an operation cites: a list or one id, numbers or text like `3`, `#3`, `m3`."""
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if isinstance(item, bool):
            continue
        if isinstance(item, int):
            out.append(item)
        elif isinstance(item, str) and re.fullmatch(r"\s*(?:#|m|msg|message)?\s*-?\d{1,18}\s*", item, re.I):
            out.append(int(re.sub(r"[^\d-]", "", item)))
        elif isinstance(item, dict) and "id" in item:
            out.extend(message_ids_of(item["id"]))
        else:
            out.append(item)  # kept as given: refused as foreign with the others that are not the batch's
    return out


def _category(value) -> str:
    name = re.sub(r"[#_\s]+", " ", str(value)).strip().lower()
    if name not in CATEGORY_NAMES:
        raise MemoryRowError(INVALID_CATEGORY, f"category must be one of {', '.join(Category.values)}, "
                                               f"got {value!r}")
    return CATEGORY_NAMES[name]


def derived_key(category: str, value: str) -> str:
    """A stable key for an `add` the model gave none: a few of the value's words and a short hash of the
    category and its normalised words, so the same fact again lands on the same row."""
    slug = "_".join(re.findall(r"[a-z0-9]+", value.lower()))[:40].strip("_") or "fact"
    digest = hashlib.sha256(f"{category}:{' '.join(sorted(words(value)))}".encode()).hexdigest()[:8]
    return f"{slug}_{digest}"


def read_op(raw, known_keys: dict[str, str]) -> Op:
    """One proposed item as an `Op`, or MemoryRowError (code and reason) when it cannot be understood.

    `known_keys` maps the keys of the rows shown to the model to their categories: an `add` without a
    category but with the key of a shown row has an obvious target.
    """
    if not isinstance(raw, dict):
        raise MemoryRowError(MALFORMED, "an operation must be a JSON object")
    fields = _lowered(raw)
    op = _op_of(fields)
    value = _first(fields, VALUE_FIELDS)
    if value is not None and not isinstance(value, str):
        raise MemoryRowError(MALFORMED, "the operation needs value as text")
    value = value.strip() if value is not None else None
    found = Op(op=op.op, value=value, notes=op.notes, reason=str(fields.get("reason") or fields.get("why") or ""),
               message_ids=message_ids_of(_first(fields, MESSAGE_FIELDS)) if _first(fields, MESSAGE_FIELDS)
               is not None else [])
    if op.op == "add":
        return _read_add(found, fields, known_keys)
    found.memory_id = _row_id(_first(fields, ID_FIELDS)) if _first(fields, ID_FIELDS) is not None else None
    if found.memory_id is None:
        raise MemoryRowError(MALFORMED, "the operation needs the id of an existing row")
    if op.op == "replace":
        if value is None:
            raise MemoryRowError(MALFORMED, "the operation needs value as text")
        category = fields.get("category")
        found.category = _category(category) if category not in (None, "") else None
    return found


def _op_of(fields: dict) -> Op:
    for name in OP_FIELDS:
        value = fields.get(name)
        if isinstance(value, str) and value.strip().lower() in OP_NAMES:
            return Op(op=OP_NAMES[value.strip().lower()])
    named = fields.get("op") or fields.get("action") or fields.get("operation")
    if named:
        raise MemoryRowError(UNKNOWN_OP, f"unknown operation {str(named)[:40]!r}; use add, replace or archive")
    # No operation named: a value with an id corrects that row, a value without one is a new fact.
    if _first(fields, VALUE_FIELDS) is None:
        raise MemoryRowError(MALFORMED, "the operation names no op (add, replace or archive) and has no value")
    inferred = "replace" if _first(fields, ID_FIELDS) is not None else "add"
    found = Op(op=inferred)
    found.note(OP_INFERRED, f"no op named: read as {inferred}")
    return found


def _read_add(found: Op, fields: dict, known_keys: dict[str, str]) -> Op:
    if found.value is None:
        raise MemoryRowError(MALFORMED, "the operation needs value as text")
    key = fields.get("key")
    if key is not None and not isinstance(key, str):
        key = str(key) if isinstance(key, int | float) and not isinstance(key, bool) else None
    category = next((fields[n] for n in CATEGORY_FIELDS if fields.get(n) not in (None, "")
                     and not (n == "type" and str(fields[n]).strip().lower() in OP_NAMES)), None)
    if category is not None:
        found.category = _category(category)
        if category != fields.get("category"):
            found.note(CATEGORY_INFERRED, f"category read from {category!r}")
    elif key and key.strip() in known_keys:
        found.category = known_keys[key.strip()]
        found.note(CATEGORY_INFERRED, f"category {found.category} of the existing row with key {key.strip()!r}")
    else:
        raise MemoryRowError(MISSING_CATEGORY, "an add needs a category (identity, preference, interest, goal, "
                                               "context or directive)")
    if key and key.strip():
        found.key = key.strip()
    else:
        found.key = derived_key(found.category, found.value)
        found.note(KEY_DERIVED, f"no key given: {found.key}")
    return found
