"""REDIS_URL: django-q2 uses the Redis broker and Django the shared Redis cache (Redis at 127.0.0.1:6379)."""

import json
import os
import signal
import subprocess
import sys
import time
import uuid

import pytest
import redis

from fermix_site.conf import conf
from memory.conversations import message_append
from memory.models import Memory, ReviewRun
from tests.conftest import ROOT, process_env
from tests.fakeprovider import Reply, provider_config_toml, use_config

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

REDIS_URL = os.environ.get("FERMIX_TEST_REDIS_URL", "redis://127.0.0.1:6379/15")


@pytest.fixture
def redis_env(home):
    client = redis.Redis.from_url(REDIS_URL)
    client.ping()
    client.flushdb()
    yield process_env(FERMIX_HOME=conf.home, REDIS_URL=REDIS_URL, FERMIX_WORKERS="1")
    client.flushdb()


def python(code, env):
    return subprocess.run([sys.executable, "-c", "import django; django.setup()\n" + code], cwd=ROOT, env=env,
                          check=True, capture_output=True, text=True).stdout


def test_settings_switch_broker_and_cache_to_redis(redis_env):
    out = python("from django.conf import settings as s; from django_q.brokers import get_broker\n"
                 "print(s.Q_CLUSTER.get('redis'), s.CACHES['default']['BACKEND'], type(get_broker()).__name__)",
                 redis_env)
    assert out.split() == [REDIS_URL, "django.core.cache.backends.redis.RedisCache", "Redis"]


def test_the_cache_is_shared_between_processes(redis_env):
    token = uuid.uuid4().hex
    python(f"from django.core.cache import cache; cache.set('shared-probe', '{token}', 60)", redis_env)
    assert python("from django.core.cache import cache; print(cache.get('shared-probe'))", redis_env).strip() == token


def test_a_review_goes_through_the_redis_broker_to_the_cluster(redis_env, fake_provider):
    with use_config(provider_config_toml(fake_provider)):
        fake_provider.push(Reply(text=json.dumps({"operations": [
            {"op": "add", "category": "preference", "key": "tea", "value": "likes tea"}]})))
        message_append(agent_id="main", conversation="telegram:1", role="user", content="I like tea",
                       trust="operator")
        python("from memory.turns import turn_commit\n"
               "print(turn_commit(agent_id='main', conversation='telegram:1', peak_prompt_tokens=10))", redis_env)
        assert redis.Redis.from_url(REDIS_URL).keys("*fermix*")  # the task waits in Redis, not in the ORM queue
        cluster = subprocess.Popen([sys.executable, "manage.py", "qcluster"], cwd=ROOT, env=redis_env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        try:
            deadline = time.monotonic() + 60
            while not ReviewRun.objects.filter(status="ok").exists() and time.monotonic() < deadline:
                time.sleep(0.2)
        finally:
            os.killpg(cluster.pid, signal.SIGTERM)
            try:
                cluster.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(cluster.pid, signal.SIGKILL)
    assert Memory.objects.get().value == "likes tea"
