"""What the real server answers at the edges of HTTP: every refusal in the JSON error shape."""

import pytest

from tests.live import status_and_json

pytestmark = [pytest.mark.slow, pytest.mark.live]

APPEND = "/api/v1/agents/main/conversations/telegram:1/messages"


@pytest.fixture(scope="module")
def server(shared_server):
    return shared_server


def request(server, head: str, body: bytes = b"", host: str = "127.0.0.1") -> tuple[int, dict | None]:
    lines = head + f"\r\nHost: {host}\r\nAuthorization: Bearer {server.operator}\r\nConnection: close\r\n"
    return status_and_json(server.raw(lines.encode() + b"\r\n" + body, timeout=30))


def chunked(body: bytes, size: int = 64 * 1024) -> bytes:
    pieces = [body[i:i + size] for i in range(0, len(body), size)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in pieces) + b"0\r\n\r\n"


@pytest.mark.parametrize("body", [b"[null]", b"true", b'"x"', b"3", b"null", b"[]"])
def test_a_json_body_that_is_not_an_object_is_400_body_not_object(server, body):
    with server.client(server.operator) as client:
        answer = client.post(APPEND, content=body, headers={"Content-Type": "application/json"})
    assert (answer.status_code, answer.json()["error"]["code"]) == (400, "body_not_object")


def test_a_chunked_body_is_read_and_stored(server):
    body = chunked(b'{"role": "user", "content": "in chunks"}', 7)
    status, _ = request(server, f"POST {APPEND} HTTP/1.1\r\nContent-Type: application/json\r\n"
                                "Transfer-Encoding: chunked", body)
    assert status == 201
    with server.client(server.operator) as client:
        assert client.get(APPEND).json()["messages"][-1]["content"] == "in chunks"


def test_a_chunked_body_over_the_limit_is_413(server):
    big = b'{"role": "user", "content": "' + b"x" * (3 * 1024 * 1024) + b'"}'
    status, body = request(server, f"POST {APPEND} HTTP/1.1\r\nContent-Type: application/json\r\n"
                                   "Transfer-Encoding: chunked", chunked(big))
    assert (status, body["error"]["code"]) == (413, "body_too_large")


@pytest.mark.parametrize(("head", "status", "code"), [
    ("GET /api/v1/agents/main/memories?q=" + "a" * 9000 + " HTTP/1.1", 414, "request_line_too_long"),
    ("GET /healthz HTTP/1.1\r\nX-Long: " + "b" * 9000, 431, "headers_too_large"),
    ("GET /healthz HTTP/1.1" + "".join(f"\r\nX-{i}: y" for i in range(120)), 431, "headers_too_large"),
    (f"POST {APPEND} HTTP/1.1\r\nContent-Length: abc", 400, "invalid_header"),
    (f"POST {APPEND} HTTP/1.1\r\nContent-Length: -1", 400, "invalid_header"),
    (f"POST {APPEND} HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6", 400, "invalid_header"),
])
def test_what_gunicorn_refuses_itself_is_json(server, head, status, code):
    answer_status, body = request(server, head)
    assert (answer_status, body["error"]["code"]) == (status, code)


def test_a_disallowed_host_is_json(server):
    status, body = request(server, "GET /healthz HTTP/1.1", host="evil.example")
    assert (status, body["error"]["code"]) == (400, "disallowed_host")
    status, body = request(server, "GET /api/v1/agents/main/memories HTTP/1.1", host="evil.example")
    assert (status, body["error"]["code"]) == (400, "disallowed_host")


def test_an_unknown_path_outside_the_api_is_json(server):
    status, body = request(server, "GET /no/such/page HTTP/1.1")
    assert (status, body["error"]["code"]) == (404, "not_found")


def test_a_conversation_key_decodes_the_same_in_a_path_and_in_a_query(server):
    with server.client(server.operator) as client:
        in_path = client.get("/api/v1/agents/main/conversations/telegram:%ff/messages")
        in_query = client.get("/api/v1/agents/main/prompt?conversation=telegram:%ff")
        fine_path = client.get("/api/v1/agents/main/conversations/telegram:%C3%A9/messages")
        fine_query = client.get("/api/v1/agents/main/prompt?conversation=telegram:%C3%A9")
    assert (in_path.status_code, in_path.json()["error"]["code"]) == (400, "invalid_utf8")
    assert (in_query.status_code, in_query.json()["error"]["code"]) == (400, "invalid_utf8")
    assert fine_path.json()["conversation"] == fine_query.json()["conversation"] == "telegram:é:root"


def test_booleans_are_booleans(server):
    job = {"name": "daily", "prompt": "say hi", "schedule_type": "interval", "interval_seconds": 3600}
    with server.client(server.operator) as client:
        for wrong in (0, 1, "true", "yes"):
            answer = client.post("/api/v1/agents/main/jobs", json={**job, "enabled": wrong})
            assert (answer.status_code, answer.json()["error"]["code"]) == (422, "invalid_input"), wrong
        assert client.post("/api/v1/agents/main/jobs", json={**job, "enabled": False}).status_code == 201


def test_a_query_parameter_the_operation_does_not_take_is_400(server):
    with server.client(server.operator) as client:
        typo = client.get(APPEND, params={"limt": 5})
        fine = client.get(APPEND, params={"limit": 5})
    assert (typo.status_code, typo.json()["error"]["code"]) == (400, "unknown_parameter")
    assert "limit" in typo.json()["error"]["message"] and fine.status_code == 200


def test_integers_are_json_integers(server):
    commit = "/api/v1/agents/main/conversations/telegram:1/commit"
    with server.client(server.operator) as client:
        as_float = client.post(commit, json={"peak_prompt_tokens": 120.0})
        as_bool = client.post(commit, json={"peak_prompt_tokens": True})
        as_text = client.post(commit, json={"peak_prompt_tokens": "120"})
    assert as_float.status_code == 200
    assert [r.status_code for r in (as_bool, as_text)] == [422, 422]


def test_the_access_log_leaves_out_expected_4xx_and_keeps_the_rest(server):
    marker = "access-log-probe"  # the access log's line names the client's User-Agent
    with server.client() as anonymous:
        anonymous.headers["User-Agent"] = marker
        assert anonymous.get("/api/v1/agents/main/memories").status_code == 401
        assert anonymous.get("/no-such-page").status_code == 404
        assert anonymous.get("/healthz").status_code == 200
    # the requests went one after another on one connection: once /healthz's line is written, so are the others'
    lines = server.log_lines(marker, until="GET /healthz")
    assert len(lines) == 1 and "GET /healthz" in lines[0] and '" 200 ' in lines[0]


def test_the_landing_page_is_served_and_links_the_console_docs_and_health(server):
    with server.client() as anonymous:
        page = anonymous.get("/")
        assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
        for href in ("/admin/", "/api/v1/docs", "/healthz"):
            assert f'href="{href}"' in page.text
            assert anonymous.get(href).status_code in (200, 302)
        assert anonymous.post("/").status_code in (403, 405)  # CSRF or the method: never a 500


@pytest.mark.parametrize("path", ["/api/v1/agents/main/resources/user_md/revisions?scope=",
                                  "/api/v1/agents/main/resources/user_md/revisions/1?scope=",
                                  "/api/v1/agents/main/resources/user_md/diff?a=1&b=1&scope="])
def test_an_empty_scope_is_refused_as_its_document_says(server, path):
    # The OpenAPI document gives `scope` as `global` or a conversation key: an empty one is neither.
    with server.client(server.operator) as client:
        answer = client.get(path)
    assert (answer.status_code, answer.json()["error"]["code"]) == (422, "invalid_input"), answer.text
    assert answer.json()["error"]["details"][0]["where"] == "scope"
