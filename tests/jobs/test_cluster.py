"""A real django-q2 cluster runs the background review; a worker killed mid-review loses nothing."""

import json
import multiprocessing
import os
import signal
import subprocess
import sys
import time
from datetime import timedelta

import pytest
from django.utils import timezone
from django_q.cluster import Cluster

from fermix_site.conf import conf
from memory.conversations import message_append
from memory.models import Memory, ReviewRun, ReviewState
from memory.reviewer import review_conversation
from memory.turns import turn_commit
from tests.conftest import ROOT, process_env
from tests.fakeprovider import Reply
from tests.waiting import wait_for

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

ADD_TEA = json.dumps({"operations": [{"op": "add", "category": "preference", "key": "tea", "value": "likes tea"}]})


def start_cluster():
    log = open(conf.home / "qcluster.log", "wb")  # noqa: SIM115 - closed with the process
    return subprocess.Popen([sys.executable, "manage.py", "qcluster"], cwd=ROOT,
                            env=process_env(FERMIX_HOME=conf.home, FERMIX_WORKERS="1", FERMIX_Q_LOG_LEVEL="INFO"),
                            stdout=log, stderr=subprocess.STDOUT, start_new_session=True)


def stop(cluster, sig=signal.SIGTERM):
    os.killpg(cluster.pid, sig)
    try:
        cluster.wait(timeout=30)
    except subprocess.TimeoutExpired:
        os.killpg(cluster.pid, signal.SIGKILL)
        cluster.wait(timeout=10)
    print((conf.home / "qcluster.log").read_text()[-5000:])


def test_the_cluster_runs_the_review_enqueued_by_a_commit(model):
    model.push(Reply(text=ADD_TEA))
    message_append(agent_id="main", conversation="telegram:1", role="user", content="I like tea", trust="operator")
    assert turn_commit(agent_id="main", conversation="telegram:1", peak_prompt_tokens=10)["review"] == "queued"
    assert Memory.objects.count() == 0  # the turn did not wait for the review
    cluster = start_cluster()
    try:
        run = wait_for(lambda: ReviewRun.objects.filter(status="ok").first())
        # The run is "ok" once its rows are committed; the worker writes the files just after.
        user_md = conf.memory_dir("main") / "USER.md"
        wait_for(user_md.exists)
    finally:
        stop(cluster)
    assert run.ops_added == 1 and Memory.objects.get().value == "likes tea"
    assert user_md.read_text() == "## Preferences\n- likes tea\n"


def test_a_worker_killed_mid_review_leaves_the_conversation_reviewable(model):
    model.push(Reply(text=ADD_TEA, delay=30))  # the model is slow: the worker dies while waiting
    message_append(agent_id="main", conversation="telegram:1", role="user", content="I like tea", trust="operator")
    turn_commit(agent_id="main", conversation="telegram:1", peak_prompt_tokens=10)
    cluster = start_cluster()
    try:
        wait_for(lambda: model.requests)  # the review is waiting on the model
        state = ReviewState.objects.get()
        assert state.claimed_by and state.claim_expires_at > timezone.now()
    finally:
        stop(cluster, signal.SIGKILL)
    assert Memory.objects.count() == 0 and ReviewState.objects.get().cursor_message_id == 0
    assert review_conversation(agent_id="main", conversation="telegram:1", force=True)["reason"] == "already_running"

    # Time passes: the dead worker's claim expires.
    ReviewState.objects.update(claim_expires_at=timezone.now() - timedelta(seconds=1))
    model.push(Reply(text=ADD_TEA))
    result = review_conversation(agent_id="main", conversation="telegram:1", force=True)
    assert result["status"] == "ok" and Memory.objects.get().value == "likes tea"
    assert ReviewRun.objects.filter(status="failed", reason__startswith="abandoned").count() == 1


def test_a_stop_signal_after_the_cluster_has_stopped_is_ignored():
    # A Ctrl-C and `serve`'s SIGTERM both reach the cluster; one may arrive once the first stop has cleared
    # the stop event while the process still waits on its sentinel (django-q2 then raised AttributeError).
    handlers = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    sentinel = multiprocessing.get_context("fork").Process(target=time.sleep, args=(30,))
    sentinel.start()
    try:
        cluster = Cluster()  # (it installs its signal handlers in this process: put back below)
        cluster.sentinel, cluster.stop_event = sentinel, None
        cluster.sig_handler(signal.SIGTERM, None)
        assert sentinel.is_alive()  # nothing was stopped a second time
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        sentinel.kill()
        sentinel.join()
