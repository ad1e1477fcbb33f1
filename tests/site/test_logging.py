"""The terminal at the default log level: no line per queued task, no line per expected 4xx answer."""

import dataclasses
import logging

import pytest
from django_q.conf import logger as django_q_logger

from fermix_site import conf as conf_module

pytestmark = pytest.mark.django_db


def shown(caplog, name):
    return [r for r in caplog.records if r.name == name]


def test_the_task_queue_shows_warnings_but_not_each_task(caplog):
    django_q_logger.info("Enqueued [fermix] 1")
    django_q_logger.info("Processed 'fermix_site.tasks.heartbeat' (fermix-heartbeat)")
    django_q_logger.warning("reincarnated worker Process-1 after timeout")
    assert [r.getMessage() for r in shown(caplog, "django-q")] == ["reincarnated worker Process-1 after timeout"]


def test_an_expected_4xx_is_not_logged(client, caplog):
    assert client.get("/api/v1/agents/main/no-such-endpoint").status_code == 404
    assert client.get("/api/v1/agents/main/memories").status_code == 401
    assert client.get("/no-such-page").status_code == 404
    assert shown(caplog, "django.request") == []


def test_a_5xx_is_still_logged(client, caplog, home):
    with conf_module.conf.use(dataclasses.replace(home, storage=conf_module.StorageConf(min_free_mb=10**7))):
        response = client.get("/healthz")  # the disk counts as full
    assert response.status_code == 503
    assert [(r.levelno, r.getMessage()) for r in shown(caplog, "django.request")] == [
        (logging.ERROR, "Service Unavailable: /healthz")]
