"""`/` is a small page that leads to the console, the API documentation and the health check."""

import pytest

pytestmark = pytest.mark.django_db


def test_it_links_the_console_the_api_docs_and_the_health_check(client):
    response = client.get("/")
    assert response.status_code == 200 and response["content-type"].startswith("text/html")
    page = response.content.decode()
    for href in ('href="/admin/"', 'href="/api/v1/docs"', 'href="/api/v1/redoc"', 'href="/healthz"'):
        assert href in page
    assert "python manage.py doctor" in page


def test_each_link_answers(client):
    assert client.get("/healthz").status_code in (200, 503)
    assert client.get("/admin/").status_code == 302  # to the console's login
    assert client.get("/api/v1/docs").status_code == 200


def test_it_answers_head_and_refuses_post(client):
    assert client.head("/").status_code == 200
    assert client.post("/").status_code == 405
