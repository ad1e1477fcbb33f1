"""Time words in a recall query, read at a fixed clock."""

from datetime import UTC, datetime

import pytest

from memory.search.when import parse_bound, read_time

NOW = datetime(2026, 3, 18, 10, 30, tzinfo=UTC)  # a Wednesday


def day(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(("query", "rest", "start", "end", "label"), [
    ("what did I do yesterday?", "what did I do ?", "2026-03-17", "2026-03-18", "time: 2026-03-17"),
    ("what did she tell me last night?", "what did she tell me ?", "2026-03-17", "2026-03-18", "time: 2026-03-17"),
    ("the day before yesterday I", "I", "2026-03-16", "2026-03-17", "time: 2026-03-16"),
    ("where was I in August 2023", "where was I", "2023-08-01", "2023-09-01", "time: 2023-08"),
    ("what happened on 25 May 2022", "what happened", "2022-05-25", "2022-05-26", "time: 2022-05-25"),
    ("on March 5th, 2026 I", "I", "2026-03-05", "2026-03-06", "time: 2026-03-05"),
    ("on 2025-12-24 we", "we", "2025-12-24", "2025-12-25", "time: 2025-12-24"),
    ("which class started on the 5th of March", "which class started", "2026-03-05", "2026-03-06",
     "time: 2026-03-05"),
    ("what did I plan in December", "what did I plan", "2025-12-01", "2026-01-01", "time: 2025-12"),
    ("in March what", "what", "2026-03-01", "2026-04-01", "time: 2026-03"),
    ("in 2024 who", "who", "2024-01-01", "2025-01-01", "time: 2024"),
    ("what did we say last week", "what did we say", "2026-03-09", "2026-03-16", "time: week of 2026-03-09"),
    ("last month's trip", "'s trip", "2026-02-01", "2026-03-01", "time: 2026-02"),
    ("last friday dinner", "dinner", "2026-03-13", "2026-03-14", "time: 2026-03-13"),
    ("what did I buy three weeks ago", "what did I buy", "2026-02-22", "2026-03-01", "time: 2026-02-25 ± 3 d"),
    ("2 days ago", "", "2026-03-15", "2026-03-18", "time: 2026-03-16 ± 1 d"),
])
def test_a_time_expression_becomes_a_span_and_leaves_the_query(query, rest, start, end, label):
    read = read_time(query, NOW)
    assert read.text == rest
    assert [(s.start, s.end, s.label) for s in read.spans] == [(day(start), day(end), label)]


def test_may_the_verb_is_no_month_and_text_without_time_is_unchanged():
    assert read_time("may I ask where Rosa teaches?", NOW).spans == ()
    assert read_time("may I ask where Rosa teaches?", NOW).text == "may I ask where Rosa teaches?"
    assert read_time("May 2025 plans, may I?", NOW).text == "plans, may I?"


def test_several_expressions_are_read_in_order_and_an_earlier_form_keeps_its_words():
    read = read_time("in March what, yesterday and on 25 May 2022, or in 2024?", NOW)
    assert [s.label for s in read.spans] == ["time: 2026-03", "time: 2026-03-17", "time: 2022-05-25", "time: 2024"]
    assert read.text == "what, and , or ?"
    # "May 2022" and "2022" lie inside "on 25 May 2022", whose form comes first: one span, not three.
    assert len(read_time("on 25 May 2022 " * 50, NOW).spans) == 50


def test_an_impossible_day_is_read_as_its_month():
    assert [s.label for s in read_time("on 31 February 2026", NOW).spans] == ["time: 2026-02"]


def test_bounds_are_dates_or_date_times_in_utc():
    assert parse_bound("2023-08-01") == day("2023-08-01")
    assert parse_bound("2023-08-01T12:00:00+02:00") == datetime(2023, 8, 1, 10, tzinfo=UTC)
    assert parse_bound("2023-08-01T12:00:00") == datetime(2023, 8, 1, 12, tzinfo=UTC)
    with pytest.raises(ValueError):
        parse_bound("last week")
