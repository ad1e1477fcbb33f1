"""Progress of a long command: a bar redrawn in place on a terminal, a plain line every `every` units otherwise.

A log file or a pipe gets a few whole lines instead of thousands of carriage returns, and a person at a
terminal sees the bar move. The commands write it to standard error when standard output carries data
(`memory_export` without `--output`).
"""

from __future__ import annotations

import time

BAR = 30


class Progress:
    def __init__(self, out, total: int, *, unit: str = "row", every: int = 10_000, label: str = ""):
        self.out, self.total, self.unit, self.every = out, max(total, 0), unit, max(every, 1)
        self.label = f"{label} " if label else ""
        self.tty = bool(getattr(out, "isatty", lambda: False)())
        self.done = 0
        self._next_line = self.every
        self._drawn_at = 0.0
        self._started = time.monotonic()

    def advance(self, count: int = 1) -> None:
        self.update(self.done + count)

    def update(self, done: int) -> None:
        """Say that `done` units are finished (a count, not an increment)."""
        self.done = done
        if self.tty:
            now = time.monotonic()
            if now - self._drawn_at >= 0.1 or done >= self.total:  # at most ten redraws a second
                self._drawn_at = now
                self.out.write("\r" + self.line(), ending="")
                self.out.flush()
        elif done >= self._next_line:
            self.out.write(self.line())
            self._next_line = (done // self.every + 1) * self.every

    def finish(self) -> None:
        """End the bar's line on a terminal; elsewhere write the final count unless it was just written."""
        if self.tty:
            self.out.write("\r" + self.line())
        elif self.done and self.done != self._next_line - self.every:
            self.out.write(self.line())

    def line(self) -> str:
        count = f"{self.done:,}/{self.total:,} {self.unit}s" if self.total else f"{self.done:,} {self.unit}s"
        seconds = time.monotonic() - self._started
        if not self.tty or not self.total:  # without a total (a stream of unknown length) there is no bar
            return f"{self.label}{count} ({seconds:,.0f} s)"
        filled = BAR * min(self.done, self.total) // max(self.total, 1)
        return f"{self.label}[{'#' * filled}{'.' * (BAR - filled)}] {count}"
