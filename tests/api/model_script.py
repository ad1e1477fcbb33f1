"""Scripted answers for the fake provider, per kind of model call.

A turn, the reviewer, the compactor and a job run may call the model in any order (some of them from
a django-q2 worker), so a single queue of replies would hand one caller another's answer. `Script`
tells the calls apart by their system prompt and answers each from its own queue, then its default.
"""

from __future__ import annotations

import threading

from tests.fakeprovider import Reply, Request

MARKERS = {
    "reviewer": "You maintain the long-term memory",
    "compactor": "You write the running summary",
    "job": "You are running the scheduled job",
}


def kind_of(request: Request) -> str:
    body = request.body or {}
    system = " ".join(str(m.get("content")) for m in body.get("messages", []) if m.get("role") == "system")
    system += str(body.get("system", ""))
    return next((kind for kind, marker in MARKERS.items() if marker in system), "turn")


class Script:
    def __init__(self):
        # Each default is a Reply, or a function of the request that returns one.
        self.defaults = {"turn": Reply(text="ok"), "reviewer": Reply(text="Nothing to save."),
                         "compactor": Reply(text="The user and the assistant talked about the weather."),
                         "job": Reply(text="Nothing new today.")}
        self.queues: dict[str, list[Reply]] = {kind: [] for kind in self.defaults}
        self.calls: list[tuple[str, Request]] = []
        self._lock = threading.Lock()

    def push(self, kind: str, *replies: Reply) -> None:
        with self._lock:
            self.queues[kind].extend(replies)

    def requests(self, kind: str) -> list[Request]:
        with self._lock:
            return [request for seen, request in self.calls if seen == kind]

    def __call__(self, request: Request) -> Reply:
        kind = kind_of(request)
        with self._lock:
            self.calls.append((kind, request))
            if self.queues[kind]:
                return self.queues[kind].pop(0)
        default = self.defaults[kind]
        return default(request) if callable(default) else default
