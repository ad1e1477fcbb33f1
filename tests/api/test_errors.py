"""Errors: one JSON shape, the right status, and no input that produces a 500."""

import json

import pytest
from django.test import Client

from tests.api.test_authorisation import ENDPOINTS, world  # noqa: F401 - the fixture
from tests.personas import BASE, Caller, error_of

pytestmark = pytest.mark.django_db

MESSAGES = BASE + "/agents/main/conversations/telegram:1/messages"
MIB = 1024 * 1024


def send(caller, body: bytes, *, url=MESSAGES, method="post", **extra):
    return caller.client.generic(method.upper(), url, body, content_type="application/json",
                                 headers=caller.headers(), **extra)


def test_it_answers_413_to_a_body_over_1_mib(home, bot):
    body = json.dumps({"role": "user", "content": "x" * MIB}).encode()
    assert error_of(send(bot, body)) == (413, "body_too_large")


def test_it_answers_413_before_looking_at_the_key(home, anonymous):
    assert error_of(send(anonymous, b"{" + b" " * MIB + b"}")) == (413, "body_too_large")


def test_a_body_just_under_the_limit_is_read_and_checked(home, bot):
    response = send(bot, json.dumps({"role": "user", "content": "x" * (MIB - 200)}).encode())
    assert error_of(response) == (422, "invalid_input")  # read, then refused by the 512 KiB message limit
    assert response.json()["error"]["message"].startswith("content: String should have at most")
    response = send(bot, json.dumps({"role": "user", "content": "é" * (300 * 1024)}, ensure_ascii=False).encode())
    assert error_of(response) == (400, "content_too_large")  # under 512 Ki characters, over 512 KiB of UTF-8


@pytest.mark.parametrize("length", ["abc", "-1", "1e3", " "])
def test_an_invalid_content_length_is_a_400(home, bot, length):
    response = send(bot, b'{"role": "user", "content": "hi"}', CONTENT_LENGTH=length)
    if length.strip():
        assert error_of(response) == (400, "invalid_content_length")
    else:
        assert response.status_code < 500


def test_invalid_utf8_is_a_400(home, bot):
    assert error_of(send(bot, b'{"role": "user", "content": "caf\xe9"}')) == (400, "invalid_utf8")


@pytest.mark.parametrize("depth", [40, 5000, 200_000])
def test_deeply_nested_json_is_a_400(home, bot, depth):
    body = b'{"role": "user", "content": "hi", "metadata": {"a": ' + b"[" * depth + b"]" * depth + b"}}"
    assert error_of(send(bot, body)) == (400, "too_deep")


@pytest.mark.parametrize("body, code", [
    (b"{", "invalid_json"),
    (b"not json", "invalid_json"),
    (b'{"role": "user", "content": NaN}', "invalid_json"),
    (b'{"role": "user", "content": "x", "metadata": {"n": 1e999}}', "invalid_json"),
    (b'{"role": "user", "content": "\\ud800"}', "invalid_text"),
    (b'{"role": "user", "content": "x", "metadata": {"\\udfff": 1}}', "invalid_text"),
])
def test_malformed_json_is_a_400_saying_what_is_wrong(home, bot, body, code):
    assert error_of(send(bot, body)) == (400, code)


def test_a_field_that_fails_validation_is_a_422_naming_it(home, bot):
    status, code = error_of(response := bot.post("/agents/main/conversations/telegram:1/messages",
                                                 {"role": "robot", "content": 5}))
    assert (status, code) == (422, "invalid_input")
    error = response.json()["error"]
    assert error["message"].startswith("role: Input should be")
    assert {d["where"] for d in error["details"]} == {"role", "content"}


def test_an_unknown_route_under_the_api_is_a_json_404(home, bot, anonymous):
    assert error_of(bot.get("/agents/main/nothing-here")) == (404, "unknown_endpoint")
    assert error_of(anonymous.post("/no/such/thing", {})) == (404, "unknown_endpoint")
    assert error_of(bot.get("/agents/main/memories/")) == (404, "unknown_endpoint")  # no slash redirect


def test_a_wrong_method_is_a_json_405(home, bot):
    response = bot.call("put", "/agents/main/jobs", {})
    assert error_of(response) == (405, "method_not_allowed")
    assert set(response["Allow"].replace(" ", "").split(",")) == {"GET", "POST"}


@pytest.mark.parametrize("agent", ["..", "a%20b", "x" * 65, "%01"])
def test_an_invalid_agent_id_in_the_path_is_a_400(home, bot, agent):
    assert error_of(bot.get(f"/agents/{agent}/memories")) == (400, "invalid_agent")


@pytest.mark.parametrize("conv", ["a:b:c:d", "nochannel", "te%20st:1", "x:%0a"])
def test_an_invalid_conversation_key_is_a_400(home, bot, conv):
    assert error_of(bot.get(f"/agents/main/conversations/{conv}/messages")) == (400, "invalid_conversation")


@pytest.mark.parametrize("url", ["/agents/main%00/memories", "/agents/main/memories?q=a%00b",
                                 "/agents/main/conversations/telegram:1%00/messages"])
def test_a_nul_anywhere_in_the_url_is_a_400(home, bot, url):
    assert error_of(bot.get(url)) == (400, "invalid_text")


@pytest.mark.parametrize("field", ["content", "sender"])
def test_a_nul_in_any_json_text_is_a_400(home, bot, field):
    body = {"role": "user", "content": "hi", field: "a\u0000b"}
    assert error_of(send(bot, json.dumps(body).encode())) == (400, "invalid_text")
    body = {"role": "user", "content": "hi", "metadata": {"k\u0000": 1}}
    assert error_of(send(bot, json.dumps(body).encode())) == (400, "invalid_text")


def test_csrf_does_not_apply_to_bearer_key_calls(home, keys):
    caller = Caller(Client(enforce_csrf_checks=True), keys["channel"])
    assert caller.post("/agents/main/conversations/telegram:1/messages",
                       {"role": "user", "content": "hi"}).status_code == 201


def test_unknown_ids_are_404s(home, operator):
    assert error_of(operator.post("/memories/999/archive", {"reason": "x"})) == (404, "not_found")
    assert error_of(operator.post("/review-runs/999/undo", {})) == (404, "not_found")
    assert error_of(operator.get("/agents/main/jobs/999")) == (404, "not_found")
    assert error_of(operator.get("/agents/main/resources/soul_md/revisions/1")) == (404, "unknown_resource")
    assert error_of(operator.get("/agents/main/resources/nope_md/revisions")) == (400, "unknown_type")


HOSTILE_BODIES = [
    b"", b"null", b"[]", b'"text"', b"0", b"{}", b'{"a": {}}', b"\x00\xff\xfe", b"\xef\xbb\xbf{}",
    b'{"role": 5, "content": []}', b'{"content": "\\u0000"}', b'{"trust": "root"}',
    b'{"revision": 99999999999999999999999}', b'{"revision": -1}', b'{"peak_prompt_tokens": 1e300}',
    b'{"arguments": [], "conversation": "telegram:1"}', b'{"conversation": "::::"}',
    b'{"mode": "revert", "revision": 2147483648}', b'{"schedule_type": "cron", "cron": "* * *"}',
    b'{"device_id": "../../etc", "role": "user", "text": "x"}', b'{"metadata": {"a": "\\u0000"}}',
    b'{"name": null, "prompt": null, "enabled": null, "schedule_type": null, "silent_marker": null}',
    b'{"enabled": null}', b'{"schedule_type": "once", "run_at": "2026-13-45T99:00:00"}',
    b'{"schedule_type": "once", "run_at": "1900-01-01T00:00:00Z"}', b'{"interval_seconds": 2147483648}',
]
HOSTILE_IDS = ["0", "-1", "99999999999999999999999999", "1e3", "%00", "%01", "null", "a%0Ab"]


@pytest.mark.parametrize("method, path, body, rule", ENDPOINTS, ids=[f"{m} {p}" for m, p, _, _ in ENDPOINTS])
def test_no_hostile_input_produces_a_500(home, world, operator, method, path, body, rule):  # noqa: F811
    paths = {path.format(**world)}
    for value in HOSTILE_IDS:
        paths.add(path.format(live=value, archived=value, run=value, job=value, token=value)
                  .replace("/revisions/1", f"/revisions/{value}").replace("a=1", f"a={value}"))
    for url in paths:
        for raw in HOSTILE_BODIES if method != "get" else [b""]:
            response = send(operator, raw, url=BASE + url, method=method)
            assert response.status_code < 500, (method, url, raw, response.content)
            assert response["Content-Type"].startswith("application/json"), (url, raw)


HOSTILE_QUERIES = ["limit=abc", "limit=99999999999999999999", "limit=-5", "a=1&b=99999999999999999999",
                   "a=x&b=1", "context=-1", "scope=a%0Ab", "scope=", "conversation=%2F%2F", "q=%FF%FE",
                   "q=" + "x" * 2000, "archived=maybe", "realtime=2", "owner_id=..", "category=nope", "wait=yes"]


@pytest.mark.parametrize("method, path, body, rule", ENDPOINTS, ids=[f"{m} {p}" for m, p, _, _ in ENDPOINTS])
def test_no_hostile_query_produces_a_500(home, world, operator, method, path, body, rule):  # noqa: F811
    base = path.format(**world).split("?")[0]
    for query in HOSTILE_QUERIES:
        response = send(operator, json.dumps(body or {}).encode(), url=f"{BASE}{base}?{query}", method=method)
        # 503 `no_provider` is an honest answer here (no model is configured); only 500 is a bug.
        assert response.status_code != 500, (method, base, query, response.content)
        assert response["Content-Type"].startswith("application/json"), (base, query)
