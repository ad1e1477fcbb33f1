"""The schemathesis checks the API is held to, for the in-process fuzz and the live-server run."""

from schemathesis import checks as st_checks

# Checks that need a stateful run (links between operations) or a time limit we do not set.
NOT_FOR_SINGLE_CALLS = {"use_after_free", "ensure_resource_availability", "max_response_time"}



def never_a_500(ctx, response, case):
    """A 500 is a bug. 502/503/504/507 are answers the document lists where a provider or the disk
    fails (status_code_conformance holds them to it); schemathesis' not_a_server_error refuses them all."""
    if response.status_code == 500:
        raise AssertionError(f"500 from {case.method} {case.formatted_path}: {response.text[:500]}")


# Refusals schemathesis does not count as one: a body, request line or headers over the server's limit.
SIZE_REFUSALS = {413, 414, 431}


def rejects_invalid_data(ctx, response, case):
    """negative_data_rejection, with the size refusals counted: what is over a limit is refused unread."""
    if response.status_code not in SIZE_REFUSALS:
        return st_checks.negative_data_rejection(ctx, response, case)
    return None


# 400s about the request's form: a valid request (by the document) must never get one, nor a 422 from
# validation. A 400 with any other code is a service's own rule about the values together or about now
# (a `once` job's run_at in the future, a cron croniter can read, an instruction for `suggest`), which
# no JSON Schema can state.
FORM_REFUSALS = {"invalid_json", "invalid_utf8", "invalid_text", "too_deep", "body_not_object",
                 "invalid_content_length", "unknown_parameter", "invalid_header", "bad_request",
                 "invalid_agent", "invalid_conversation", "invalid_idempotency_key"}


def accepts_valid_data(ctx, response, case):
    """positive_data_acceptance, with a service's own rule (a 400 not about the request's form) allowed."""
    if response.status_code == 400:
        code = (response.json() or {}).get("error", {}).get("code")
        if code not in FORM_REFUSALS:
            return None
    return st_checks.positive_data_acceptance(ctx, response, case)


REPLACED = {"not_a_server_error": never_a_500, "negative_data_rejection": rejects_invalid_data,
            "positive_data_acceptance": accepts_valid_data}


def all_checks() -> list:
    st_checks.load_all_checks()
    return [REPLACED.get(check.__name__, check) for check in st_checks.CHECKS.get_all()
            if check.__name__ not in NOT_FOR_SINGLE_CALLS]
