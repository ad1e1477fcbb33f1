"""A schema-driven fuzz of the whole API from its OpenAPI document: no 500, no response off its schema."""

from collections import Counter

import pytest
import schemathesis
from django.core.signals import request_finished, request_started
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings
from schemathesis.specs.openapi.checks import content_type_conformance, response_schema_conformance

from api.services import apikey_create
from tests.schema_checks import never_a_500

pytestmark = [pytest.mark.django_db, pytest.mark.slow]


@pytest.fixture
def api_schema():
    from fermix_site.wsgi import application

    # As Django's test client does: keep the test's connection (and transaction) open across requests.
    request_started.disconnect(close_old_connections)
    request_finished.disconnect(close_old_connections)
    yield schemathesis.openapi.from_wsgi("/api/v1/openapi.json", application)
    request_started.connect(close_old_connections)
    request_finished.connect(close_old_connections)


@pytest.fixture
def operator_key(db, home):
    return apikey_create(name="fuzz", role="operator")[1]


def test_no_input_breaks_the_api(api_schema, operator_key):
    headers = {"Authorization": f"Bearer {operator_key}"}
    failures, operations, statuses = [], 0, Counter()

    def count(ctx, response, case):
        statuses[response.status_code // 100 * 100] += 1
    for result in api_schema.get_all_operations():
        operation = result.ok()
        operations += 1

        @given(case=operation.as_strategy())
        @settings(max_examples=12, deadline=None, derandomize=True, database=None,
                  suppress_health_check=list(HealthCheck))
        def fuzz(case):
            case.call_and_validate(headers=headers,
                                   checks=[count, never_a_500, response_schema_conformance,
                                           content_type_conformance])

        try:
            fuzz()
        except Exception as exc:  # collect every operation's failure, then report them all
            failures.append(f"{operation.method.upper()} {operation.path}: {str(exc)[:800]}")
    assert operations >= 30 and sum(statuses.values()) >= operations * 5
    assert statuses[200] > 0 and statuses[400] > 0  # valid and invalid inputs both reached the code
    assert failures == []
