"""What a model call can fail with. `transient` decides whether the chain may try the next provider."""

from __future__ import annotations


class ProviderError(Exception):
    """A provider did not give a usable answer.

    `transient` is true for failures another provider (or a later attempt) may not share: connect errors,
    timeouts, 408/429/5xx, a malformed or oversized answer. A 4xx that any provider would also refuse is
    not transient, and the chain stops on it.
    """

    def __init__(self, message: str, *, transient: bool, status: int | None = None, provider: str = ""):
        super().__init__(message)
        self.transient = transient
        self.status = status
        self.provider = provider
        self.failures: list[ProviderError] = []


class ContextLengthError(ProviderError):
    """The prompt does not fit the model's context window; the fix is /compact or /new, not another try."""

    def __init__(self, message: str, *, status: int | None = 400, provider: str = ""):
        super().__init__(message, transient=False, status=status, provider=provider)


class NoProviderConfigured(ProviderError):
    """config.toml has no [fermix_core.providers.*] table."""

    def __init__(self, message: str = "no model provider is configured: add a [fermix_core.providers.<name>] "
                                      "table to config.toml (see docs/providers.md)"):
        super().__init__(message, transient=False)


class BudgetSpent(ProviderError):
    """The caller's time budget (a whole turn's) ran out before a provider answered."""

    def __init__(self):
        super().__init__("the time this request may take was spent before a provider answered", transient=False)
