"""What the evaluation data is made of: personas, their sessions and turns, questions and their classes."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

CLASSES = ("keyword", "paraphrase", "reply", "temporal", "multi_hop")
MESSAGE_GAP = timedelta(minutes=2)

Tags = tuple[str, ...]


def moment(text: str) -> datetime:
    """`YYYY-MM-DD HH:MM` in UTC."""
    return datetime.strptime(text, "%Y-%m-%d %H:%M").replace(tzinfo=UTC)


@dataclass(frozen=True)
class Question:
    text: str
    kind: str
    hops: tuple[Tags, ...]  # every hop must be found; any tag of a hop finds it (one hop unless multi_hop)
    now: datetime | None = None  # a relative temporal question: the moment it is asked

    @property
    def tags(self) -> Tags:
        return tuple(t for hop in self.hops for t in hop)


@dataclass(frozen=True)
class Turn:
    tag: str
    role: str
    text: str
    at: datetime
    session: int


@dataclass(frozen=True)
class Persona:
    owner: str
    channel: str
    chat: str
    about: str
    asked_at: datetime
    sessions: list[tuple[str, list[tuple[str, str, str]]]]  # (start, [(tag or "", role, text), ...])
    questions: list[Question]
    agent: str = "main"

    def messages(self) -> list[Turn]:
        """The conversation's messages in order."""
        out = []
        for number, (start, turns) in enumerate(self.sessions):
            at = moment(start)
            for i, (tag, role, text) in enumerate(turns):
                out.append(Turn(tag, role, text, at + MESSAGE_GAP * i, number))
        return out

    def when_asked(self, question: Question) -> datetime:
        return question.now or self.asked_at


def _hop(tags: str | Tags) -> Tags:
    return (tags,) if isinstance(tags, str) else tuple(tags)


def keyword(text: str, *tags: str) -> Question:
    return Question(text, "keyword", (tags,))


def paraphrase(text: str, *tags: str) -> Question:
    return Question(text, "paraphrase", (tags,))


def reply(text: str, *tags: str) -> Question:
    return Question(text, "reply", (tags,))


def temporal(text: str, *tags: str, now: str | None = None) -> Question:
    return Question(text, "temporal", (tags,), moment(now) if now else None)


def multi_hop(text: str, *hops: str | Tags) -> Question:
    return Question(text, "multi_hop", tuple(_hop(h) for h in hops))
