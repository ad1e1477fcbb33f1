"""A small, realistic world for the console tests (whose staff are the shared personas, tests.personas):
every row made through the services."""

import json
from dataclasses import dataclass

import pytest
from django.utils import timezone

from api.services import apikey_create
from jobs.models import JobRun, ScheduledJob
from memory.models import Memory, Message, ReviewRun
from memory.prompt_files import prompt_files_rebuild
from memory.reviewer import review_conversation
from resources.models import Resource
from resources.services import resource_commit, resource_write_file
from resources.soul import soul_propose
from tests.fakeprovider import Reply, provider_config_toml, use_config
from tests.memory_factories import fact
from tests.personas import say

HOSTILE = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'
CONV = "telegram:42"


@dataclass
class World:
    message: Message
    fact: Memory
    run: ReviewRun
    soul: Resource
    user_md: Resource
    checkpoint: Resource
    job: ScheduledJob
    key_name: str


def soul_write(content):
    return resource_write_file(agent_id="main", resource_type="soul_md", content=content, mutation_source="manual_edit")


@pytest.fixture
def world(home, fake_provider):
    """Messages, a review run that wrote a fact, prompt files, SOUL.md revisions, a checkpoint, a job, a key."""
    with use_config(provider_config_toml(fake_provider)):
        message = say("I moved to Lisbon last year and I run every morning")
        say("Noted.", role="assistant")
        fake_provider.push(Reply(text=json.dumps({"operations": [
            {"op": "add", "category": "identity", "key": "home_city", "value": "lives in Lisbon"}]})))
        review_conversation(agent_id="main", conversation=CONV, force=True)
        run = ReviewRun.objects.get()
        tea = fact("tea", "prefers green tea", "preference", minute=5)
        prompt_files_rebuild(agent_id="main", trigger="test")
        soul_write("# Soul\n\nBe kind and brief.\n")
        soul_write("# Soul\n\nBe kind, brief and exact.\n")
        soul_propose(agent_id="main", mode="revert", revision=1, trust="operator", requested_by="test")
        resource_commit(agent_id="main", resource_type="checkpoint", scope_id=f"{CONV}:root",
                        content="The user moved to Lisbon.", mutation_source="compaction")
        job = ScheduledJob.objects.create(agent_id="main", name="morning brief", prompt="Summarise the news",
                                          schedule_type="interval", interval_seconds=3600)
        JobRun.objects.create(job=job, agent_id="main", status="ok", started_at=timezone.now(), output="done")
        apikey_create(name="telegram-bot", role="channel")
        yield World(
            message=message, fact=tea, run=run,
            soul=Resource.objects.get(resource_type="soul_md"),
            user_md=Resource.objects.get(resource_type="user_md"),
            checkpoint=Resource.objects.get(resource_type="checkpoint"),
            job=job, key_name="telegram-bot",
        )
