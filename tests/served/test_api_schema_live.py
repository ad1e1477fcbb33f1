"""The OpenAPI document against the running server: every operation fuzzed with valid and invalid data,
every check schemathesis has (stateful ones aside)."""

import random

import pytest
import schemathesis
from hypothesis import HealthCheck, given, seed, settings
from schemathesis import GenerationMode

from tests.schema_checks import all_checks

pytestmark = [pytest.mark.slow, pytest.mark.live]

FIXED_SEEDS = [1, 20261201]
RANDOM_SEEDS = 2  # printed, so a failure can be replayed with its seed
EXAMPLES = 8


@pytest.fixture(scope="module")
def server(shared_server):
    return shared_server


def test_the_live_server_meets_its_openapi_document(server, capsys):
    schema = schemathesis.openapi.from_url(server.base + "/api/v1/openapi.json")
    # The API refuses NUL and lone surrogates in any text (PostgreSQL cannot store them), with a 400 that
    # test_hostile_input checks; valid data here is text PostgreSQL can hold.
    # The key is sent with every case (below), so generated cases leave the Authorization header alone:
    # a "missing header" case would carry it anyway. ignored_auth still tries each operation without it.
    schema.config.generation.update(allow_x00=False, codec="utf-8", with_security_parameters=False)
    headers = {"Authorization": f"Bearer {server.operator}"}
    seeds = FIXED_SEEDS + [random.randrange(2**32) for _ in range(RANDOM_SEEDS)]
    print("schemathesis seeds:", seeds)
    checks, failures, calls = all_checks(), [], 0
    for result in schema.get_all_operations():
        operation = result.ok()
        for chosen, mode in [(s, m) for s in seeds for m in GenerationMode]:
            @seed(chosen)
            @given(case=operation.as_strategy(mode))
            @settings(max_examples=EXAMPLES, deadline=None, database=None, suppress_health_check=list(HealthCheck))
            def fuzz(case):
                nonlocal calls
                calls += 1
                case.call_and_validate(base_url=server.base, headers=headers, checks=checks)

            try:
                fuzz()
            except Exception as exc:  # every operation's failure, then all of them at once
                failures.append(f"{operation.method.upper()} {operation.path} ({mode.value}, seed {chosen}): "
                                f"{str(exc)[:1500]}")
                break
    assert calls > 100
    assert failures == [], "\n\n".join(failures)
