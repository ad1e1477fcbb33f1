"""The OpenAPI document validates, lists exactly the endpoints served, and the browsable docs load."""

import pytest
from openapi_spec_validator import validate

pytestmark = pytest.mark.django_db

CONTRACT = {
    ("post", "/api/v1/agents/{agent}/conversations/{conv}/messages"),
    ("get", "/api/v1/agents/{agent}/conversations/{conv}/messages"),
    ("post", "/api/v1/agents/{agent}/conversations/{conv}/commit"),
    ("post", "/api/v1/agents/{agent}/conversations/{conv}/preflight"),
    ("post", "/api/v1/agents/{agent}/conversations/{conv}/compact"),
    ("post", "/api/v1/agents/{agent}/conversations/{conv}/clear"),
    ("post", "/api/v1/agents/{agent}/conversations/{conv}/turns"),
    ("get", "/api/v1/agents/{agent}/prompt"),
    ("post", "/api/v1/agents/{agent}/tools/{tool}"),
    ("get", "/api/v1/agents/{agent}/memories"),
    ("post", "/api/v1/memories/{memory_id}/archive"),
    ("post", "/api/v1/memories/{memory_id}/restore"),
    ("post", "/api/v1/memories/{memory_id}/approve"),
    ("post", "/api/v1/memories/{memory_id}/reject"),
    ("post", "/api/v1/agents/{agent}/review"),
    ("get", "/api/v1/agents/{agent}/review-runs"),
    ("post", "/api/v1/review-runs/{run_id}/undo"),
    ("get", "/api/v1/agents/{agent}/resources"),
    ("get", "/api/v1/agents/{agent}/resources/{resource_type}/revisions"),
    ("get", "/api/v1/agents/{agent}/resources/{resource_type}/revisions/{revision}"),
    ("get", "/api/v1/agents/{agent}/resources/{resource_type}/diff"),
    ("post", "/api/v1/agents/{agent}/resources/{resource_type}/rollback"),
    ("post", "/api/v1/agents/{agent}/soul/proposals"),
    ("post", "/api/v1/agents/{agent}/soul/proposals/{token}/apply"),
    ("post", "/api/v1/agents/{agent}/soul/proposals/{token}/deny"),
    ("post", "/api/v1/agents/{agent}/realtime/transcripts"),
    ("get", "/api/v1/agents/{agent}/jobs"),
    ("post", "/api/v1/agents/{agent}/jobs"),
    ("get", "/api/v1/agents/{agent}/jobs/{job_id}"),
    ("patch", "/api/v1/agents/{agent}/jobs/{job_id}"),
    ("delete", "/api/v1/agents/{agent}/jobs/{job_id}"),
    ("post", "/api/v1/agents/{agent}/jobs/{job_id}/run"),
    ("get", "/api/v1/agents/{agent}/jobs/{job_id}/runs"),
    ("get", "/api/v1/agents/{agent}/memory-sources"),
}


@pytest.fixture
def document(client, home):
    response = client.get("/api/v1/openapi.json")
    assert response.status_code == 200
    return response.json()


def test_the_document_is_valid_openapi(document):
    validate(document)
    assert document["openapi"].startswith("3.1")


def test_it_lists_exactly_the_endpoints_of_the_contract(document):
    assert {(method, path) for path, ops in document["paths"].items() for method in ops} == CONTRACT


def test_every_operation_needs_the_bearer_key_and_documents_the_error_shape(document):
    schemes = document["components"]["securitySchemes"]
    assert schemes == {"ApiKeyAuth": {"type": "http", "scheme": "bearer"}}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            assert operation["security"] == [{"ApiKeyAuth": []}], (method, path)
            for status in ("401", "403", "422"):
                schema = operation["responses"][status]["content"]["application/json"]["schema"]
                assert schema == {"$ref": "#/components/schemas/ErrorOut"}


def test_the_request_fields_of_the_contract_are_documented(document):
    schemas = document["components"]["schemas"]
    assert set(schemas["MessageIn"]["properties"]) == {"role", "content", "sender", "owner_id", "trust", "kind",
                                                       "metadata", "chat_type", "created_at"}
    assert set(schemas["MessageIn"]["required"]) == {"role", "content"}
    assert set(schemas["CommitIn"]["properties"]) == {"owner_id", "trust", "chat_type", "peak_prompt_tokens",
                                                      "context_window"}
    assert set(schemas["TurnOut"]["required"]) >= {"reply", "notices", "usage"}
    assert set(schemas["SoulProposalOut"]["required"]) >= {"token", "diff", "rationale", "expires_at"}
    assert set(schemas["TranscriptIn"]["properties"]) == {"device_id", "owner_id", "role", "text"}


def test_the_browsable_docs_load_their_assets_locally(client, home):
    response = client.get("/api/v1/docs")
    assert response.status_code == 200
    page = response.content.decode()
    assert "/static/ninja/swagger-ui-bundle.js" in page and "/api/v1/openapi.json" in page
    assert client.get("/static/ninja/swagger-ui-bundle.js").status_code == 200
