"""Time in a recall query: "yesterday", "last night", "last week", "in August 2023", "on 25 May 2022", "3 days ago".

`read_time(text, now)` finds the expressions a person uses to say when, turns each into a span of days
(`Span`, half-open, in UTC) and returns the query without them, so the words of the date do not match
unrelated messages ("May" the month is not "may" the verb, and a question about August should not find
every message that says "August"). Recall then filters or boosts by `created_at` (see `memory.search`).
Only the forms below are read; anything else stays query text. A day is a UTC day.
"""

from __future__ import annotations

import bisect
import re
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

MONTHS = {name: number for number, names in enumerate((
    ("january", "jan"), ("february", "feb"), ("march", "mar"), ("april", "apr"), ("may",), ("june", "jun"),
    ("july", "jul"), ("august", "aug"), ("september", "sep", "sept"), ("october", "oct"),
    ("november", "nov"), ("december", "dec")), start=1) for name in names}
WEEKDAYS = ("monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday")
NUMBERS = {"a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6, "seven": 7,
           "eight": 8, "nine": 9, "ten": 10, "eleven": 11, "twelve": 12, "couple of": 2, "few": 3}
UNITS = {"day": 1, "week": 7, "month": 30, "year": 365}

_MONTH = "|".join(sorted(MONTHS, key=len, reverse=True))
_NUMBER = r"\d{1,3}|" + "|".join(sorted(NUMBERS, key=len, reverse=True))
_ORDINAL = r"(\d{1,2})(?:st|nd|rd|th)?"
_YEAR = r"((?:19|20)\d{2})"


@dataclass(frozen=True)
class Span:
    """[start, end) in UTC; `label` says it as recall's `signals.why` does ("time: 2023-08")."""

    start: datetime
    end: datetime
    label: str

    def __contains__(self, moment: datetime) -> bool:
        return self.start <= moment < self.end


def _day(d: date) -> datetime:
    return datetime.combine(d, time(), tzinfo=UTC)


def _days(first: date, last_exclusive: date, label: str) -> Span:
    return Span(_day(first), _day(last_exclusive), label)


def _month(year: int, month: int) -> Span:
    first = date(year, month, 1)
    following = date(year + (month == 12), month % 12 + 1, 1)
    return _days(first, following, f"time: {year:04d}-{month:02d}")


def _one_day(d: date) -> Span:
    return _days(d, d + timedelta(days=1), f"time: {d.isoformat()}")


def _valid_day(year: int, month: int, day: int) -> date | None:
    try:
        return date(year, month, day)
    except ValueError:
        return None


def _latest_before(today: date, month: int, day: int | None = None) -> int:
    """The year of the latest `month` (and day) not after today: "in March" asked in May is this year's."""
    candidate = date(today.year, month, day or 1)
    return today.year if candidate <= today else today.year - 1


def _amount(text: str) -> int:
    return int(text) if text.isdigit() else NUMBERS[text]


@dataclass(frozen=True)
class _Form:
    pattern: re.Pattern
    read: object  # (match, today) -> Span | None


def _form(pattern: str):
    def register(read):
        FORMS.append(_Form(re.compile(pattern, re.IGNORECASE), read))
        return read
    return register


FORMS: list[_Form] = []


@_form(rf"\b(?:on\s+)?(?:the\s+)?{_ORDINAL}\s+(?:of\s+)?({_MONTH})\.?,?\s+{_YEAR}\b")
def _day_month_year(m, today):
    d = _valid_day(int(m.group(3)), MONTHS[m.group(2).lower()], int(m.group(1)))
    return _one_day(d) if d else None


@_form(rf"\b(?:on\s+)?({_MONTH})\.?\s+{_ORDINAL},?\s+{_YEAR}\b")
def _month_day_year(m, today):
    d = _valid_day(int(m.group(3)), MONTHS[m.group(1).lower()], int(m.group(2)))
    return _one_day(d) if d else None


@_form(r"\b(?:on\s+)?((?:19|20)\d{2})-(\d{2})-(\d{2})\b")
def _iso_day(m, today):
    d = _valid_day(int(m.group(1)), int(m.group(2)), int(m.group(3)))
    return _one_day(d) if d else None


@_form(rf"\b(?:in\s+|during\s+)?({_MONTH})\.?,?\s+{_YEAR}\b")
def _month_year(m, today):
    return _month(int(m.group(2)), MONTHS[m.group(1).lower()])


@_form(rf"\b(?:on\s+)(?:the\s+)?{_ORDINAL}\s+(?:of\s+)?({_MONTH})\b")
def _day_month(m, today):
    month, day = MONTHS[m.group(2).lower()], int(m.group(1))
    d = _valid_day(_latest_before(today, month, min(day, 28)), month, day)
    return _one_day(d) if d else None


@_form(rf"\b(?:in|during)\s+({_MONTH})\b")
def _bare_month(m, today):
    month = MONTHS[m.group(1).lower()]
    return _month(_latest_before(today, month), month)


@_form(r"\b(?:in|during)\s+((?:19|20)\d{2})\b")
def _year(m, today):
    year = int(m.group(1))
    return _days(date(year, 1, 1), date(year + 1, 1, 1), f"time: {year:04d}")


@_form(r"\bthe\s+day\s+before\s+yesterday\b")
def _day_before_yesterday(m, today):
    return _one_day(today - timedelta(days=2))


@_form(r"\b(?:yesterday|last\s+night)\b")
def _yesterday(m, today):  # "last night" is yesterday's (UTC) day, as "tonight" is today's
    return _one_day(today - timedelta(days=1))


@_form(r"\b(?:today|this\s+morning|this\s+afternoon|this\s+evening|tonight)\b")
def _today(m, today):
    return _one_day(today)


@_form(rf"\b({_NUMBER})\s+(day|week|month|year)s?\s+ago\b")
def _ago(m, today):
    days = _amount(m.group(1).lower()) * UNITS[m.group(2).lower()]
    centre = today - timedelta(days=days)
    slack = max(1, days // 7)  # "three weeks ago" is a little before or after exactly 21 days
    return _days(centre - timedelta(days=slack), centre + timedelta(days=slack + 1),
                 f"time: {centre.isoformat()} ± {slack} d")


@_form(r"\blast\s+(week|month|year)\b")
def _last(m, today):
    unit = m.group(1).lower()
    if unit == "week":
        monday = today - timedelta(days=today.weekday() + 7)
        return _days(monday, monday + timedelta(days=7), f"time: week of {monday.isoformat()}")
    if unit == "month":
        year, month = (today.year - 1, 12) if today.month == 1 else (today.year, today.month - 1)
        return _month(year, month)
    return _days(date(today.year - 1, 1, 1), date(today.year, 1, 1), f"time: {today.year - 1:04d}")


@_form(r"\bthis\s+(week|month|year)\b")
def _this(m, today):
    unit = m.group(1).lower()
    if unit == "week":
        monday = today - timedelta(days=today.weekday())
        return _days(monday, today + timedelta(days=1), f"time: week of {monday.isoformat()}")
    if unit == "month":
        return _days(today.replace(day=1), today + timedelta(days=1), f"time: {today.year:04d}-{today.month:02d}")
    return _days(date(today.year, 1, 1), today + timedelta(days=1), f"time: {today.year:04d}")


@_form(r"\blast\s+(" + "|".join(WEEKDAYS) + r")\b")
def _last_weekday(m, today):
    target = WEEKDAYS.index(m.group(1).lower())
    back = (today.weekday() - target) % 7 or 7
    return _one_day(today - timedelta(days=back))


@dataclass(frozen=True)
class TimeQuery:
    """A query with its time expressions read: `spans` (in the order found) and the rest of the text."""

    text: str
    spans: tuple[Span, ...] = ()
    phrases: tuple[str, ...] = ()


def read_time(text: str, now: datetime) -> TimeQuery:
    """The spans of time `text` names, and `text` without them. Earlier forms win where two overlap."""
    today = now.astimezone(UTC).date()
    found: list[tuple[int, int, Span]] = []  # by position; no two overlap
    for form in FORMS:
        for match in form.pattern.finditer(text):
            # Only the expressions found next to it can overlap it (one check each, not one per expression).
            at = bisect.bisect_left(found, match.start(), key=lambda item: item[0])
            if (at and found[at - 1][1] > match.start()) or (at < len(found) and found[at][0] < match.end()):
                continue
            span = form.read(match, today)
            if span is not None:
                found.insert(at, (match.start(), match.end(), span))
    if not found:
        return TimeQuery(text)
    rest, cursor = [], 0
    for start, end, _ in found:
        rest.append(text[cursor:start])
        cursor = end
    rest.append(text[cursor:])
    remaining = " ".join("".join(rest).split())
    return TimeQuery(remaining, tuple(span for _, _, span in found),
                     tuple(text[start:end] for start, end, _ in found))


def parse_bound(value: str) -> datetime:
    """An `after` / `before` argument: an ISO date (its day's start, UTC) or an ISO date-time (UTC when it
    names no offset). `after: 2023-08-01, before: 2023-09-01` is August. ValueError for anything else."""
    text = value.strip()
    if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
        return _day(date.fromisoformat(text))
    moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
