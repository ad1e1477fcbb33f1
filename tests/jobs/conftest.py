from tests.api.conftest import bot, keys, operator  # noqa: F401 - the API callers, for the job endpoints
