"""The memory app's refusals: each carries a stable `code` the API, the commands and review runs report."""


class CodedError(ValueError):
    """Base of every refusal in the memory app; nothing was written."""

    def __init__(self, code: str, message: str):
        super().__init__(message)
        self.code = code
