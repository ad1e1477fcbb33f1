"""The OpenAPI document validates, lists exactly the endpoints served, and the browsable docs load."""

import pytest
from jsonschema import Draft202012Validator
from openapi_spec_validator import validate

from memory.tool_definitions import definitions

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
    ("get", "/api/v1/agents/{agent}/tools"),
    ("post", "/api/v1/agents/{agent}/tools/memory_store"),
    ("post", "/api/v1/agents/{agent}/tools/memory_recall"),
    ("post", "/api/v1/agents/{agent}/tools/memory_forget"),
    ("post", "/api/v1/agents/{agent}/tools/memory_sources_list"),
    ("get", "/api/v1/agents/{agent}/memories"),
    ("post", "/api/v1/agents/{agent}/memories"),
    ("get", "/api/v1/memories/{memory_id}"),
    ("patch", "/api/v1/memories/{memory_id}"),
    ("get", "/api/v1/agents/{agent}/conversations"),
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
                name = operation["responses"][status]["$ref"].removeprefix("#/components/responses/")
                schema = document["components"]["responses"][name]["content"]["application/json"]["schema"]
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


def test_the_redoc_page_loads_its_assets_locally(client, home):
    response = client.get("/api/v1/redoc")
    assert response.status_code == 200
    page = response.content.decode()
    assert "/static/ninja/redoc.standalone.js" in page and "/api/v1/openapi.json" in page
    assert "cdn" not in page.lower() and "https://" not in page
    assert client.get("/static/ninja/redoc.standalone.js").status_code == 200


def test_each_error_response_is_described_once_and_referred_to(document):
    responses = document["components"]["responses"]
    assert responses["Unauthorized"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/ErrorOut"}
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            errors = {status: r for status, r in operation["responses"].items() if int(status) >= 400}
            assert errors and all(set(r) == {"$ref"} for r in errors.values()), (method, path)
            assert all(r["$ref"].removeprefix("#/components/responses/") in responses for r in errors.values())


def test_every_operation_has_a_summary_written_for_people(document):
    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            # ninja's own summary is the function's name in title case ("Tool Definitions")
            assert operation["summary"] and not operation["summary"].istitle(), (method, path, operation["summary"])


def test_each_tool_operation_types_its_arguments_with_the_tools_definition(document):
    schemas = document["components"]["schemas"]
    for tool in definitions("openai"):
        name = tool["function"]["name"]
        body = document["paths"][f"/api/v1/agents/{{agent}}/tools/{name}"]["post"]["requestBody"]
        ref = body["content"]["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
        arguments = schemas[ref]["properties"]["arguments"]
        assert {k: arguments[k] for k in tool["function"]["parameters"]} == tool["function"]["parameters"]
        assert ("arguments" in schemas[ref].get("required", [])) == bool(tool["function"]["parameters"].get(
            "required"))


def test_every_operation_shows_a_real_request_and_answer_that_fit_its_schemas(document):
    """The examples (recorded by scripts/openapi_examples.py against the real server) exist and still fit."""
    def fits(schema, example, where):
        problems = list(Draft202012Validator({**document, **schema}).iter_errors(example))  # `$ref`s resolve here
        assert not problems, (where, [p.message for p in problems[:3]])

    for path, operations in document["paths"].items():
        for method, operation in operations.items():
            where = (method, path)
            answers = [r["content"]["application/json"] for status, r in operation["responses"].items()
                       if status.startswith("2") and "example" in r.get("content", {}).get("application/json", {})]
            assert len(answers) == 1, where
            fits(answers[0]["schema"], answers[0]["example"], where)
            body = operation.get("requestBody", {}).get("content", {}).get("application/json")
            if body is not None and operation["requestBody"].get("required"):
                assert "example" in body, where
            if body is not None and "example" in body:
                fits(body["schema"], body["example"], where)
