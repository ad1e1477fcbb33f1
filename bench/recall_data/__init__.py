"""The conversations recall is evaluated on, and the questions a model asks about them.

Each module holds one owner's long conversation with agent `main` (sessions over months, each session's
messages two minutes apart from its start) and the questions about it. A question names the messages
that answer it by tag and has a class, the kind of difficulty it measures:

- `keyword`: the question shares a content word with an answer ("where does Dana work?");
- `paraphrase`: it shares none, after stemming ("which recreational activity…" / "I went bowling");
- `reply`: it matches the message before the answer, not the answer ("How old is Biscuit?" / "He's a two
  year old beagle");
- `temporal`: the answer is told apart by when it was said: an absolute date ("on 25 May 2022", "in August
  2023") or one relative to the moment the question is asked, which the question records;
- `multi_hop`: it needs two facts said in two sessions (`hops`, each answered by any of its tags).

Questions without a moment of their own are asked at their owner's `asked_at`, after the last session.
This package is plain data: it imports nothing of Django (`schema` says what the data is made of).
"""

from __future__ import annotations

from bench.recall_data import aisha, dana, rui, tomasz
from bench.recall_data.schema import CLASSES, Persona, Question, Turn

PERSONAS: list[Persona] = [dana.PERSONA, tomasz.PERSONA, aisha.PERSONA, rui.PERSONA]
QUESTIONS: list[tuple[Persona, Question]] = [(p, q) for p in PERSONAS for q in p.questions]

__all__ = ["CLASSES", "PERSONAS", "QUESTIONS", "Persona", "Question", "Turn"]
