"""The fenced code blocks of a README, for the tests that run what a README tells a new user to run."""

import re
from pathlib import Path

FENCE = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def code_blocks(path: Path, language: str) -> list[str]:
    return [body for lang, body in FENCE.findall(path.read_text(encoding="utf-8")) if lang == language]


def commands(path: Path) -> list[str]:
    """The README's shell commands, one a line, comments dropped."""
    lines = [line.split(" #")[0].strip() for block in code_blocks(path, "sh") for line in block.splitlines()]
    return [line for line in lines if line and not line.startswith("#")]
