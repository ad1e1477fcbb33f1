"""Prompt files from the database, files as each node's mirror: two nodes with their own FERMIX_HOME.

A node here is a FERMIX_HOME put in force in this process (`conf.use`); both share the test's database,
as nodes share PostgreSQL. tests/served/test_nodes.py runs the same story with real separate processes.
"""

import dataclasses
import json
from contextlib import contextmanager

import pytest

from fermix_site.conf import conf
from memory.prompt import compose_system_prompt
from resources import mirrors
from resources.bootstrap import bootstrap_seed
from resources.models import ResourceRevision
from resources.services import resource_rollback, resource_sync_files, resource_write_file

pytestmark = pytest.mark.django_db


class Node:
    def __init__(self, config, name):
        self.config, self.name = config, name

    @contextmanager
    def active(self):
        with conf.use(self.config):
            yield self

    def path(self, name):
        folder = "memory" if name in ("USER.md", "MEMORY.md") else "bootstrap"
        return self.config.home / folder / "main" / name

    def read(self, name):
        return self.path(name).read_text()

    def edit(self, name, text):
        self.path(name).write_text(text)

    def sync(self):
        with self.active():
            return resource_sync_files(agent_id="main", why="heartbeat")

    def compose(self):
        with self.active():
            return compose_system_prompt(agent_id="main")


@pytest.fixture
def nodes(home, tmp_path):
    other = tmp_path / "node-b"
    other.mkdir()
    a, b = Node(home, "a"), Node(dataclasses.replace(home, home=other), "b")
    with a.active():
        bootstrap_seed(agent_id="main")
    yield a, b
    mirrors.forget_seen()


def history(resource_type="soul_md"):
    return list(ResourceRevision.objects.filter(resource_type=resource_type).order_by("revision")
                .values_list("mutation_source", flat=True))


def write_user_md(node, content):
    with node.active():
        return resource_write_file(agent_id="main", resource_type="user_md", content=content,
                                   mutation_source="extraction_rebuild")


def soul_of(prompt):
    return [m["content"] for m in prompt.system_messages if "SOUL" in m["content"] or "Edited" in m["content"]]


def test_a_node_with_no_files_composes_from_the_database_and_mirrors_them(nodes):
    a, b = nodes
    write_user_md(a, "## About\n- Ada lives in Lisbon\n")
    assert not b.path("USER.md").exists()
    prompt = b.compose()
    assert "Ada lives in Lisbon" in prompt.system_messages[-1]["content"]
    assert prompt.prompt_hash == a.compose().prompt_hash
    assert b.read("USER.md") == "## About\n- Ada lives in Lisbon\n"
    assert b.read("SOUL.md") == a.read("SOUL.md")
    assert json.loads((b.config.home / "mirrors" / "main.json").read_text())["user_md"]


def test_a_stale_mirror_is_rewritten_never_taken_for_a_hand_edit(nodes):
    a, b = nodes
    write_user_md(a, "v1\n")
    b.sync()
    write_user_md(a, "v2\n")  # b's mirror still holds v1, as b last wrote it
    assert b.read("USER.md") == "v1\n"
    assert b.sync() == []
    assert b.read("USER.md") == "v2\n"
    assert history("user_md") == ["extraction_rebuild", "extraction_rebuild"]


def test_a_write_on_a_node_with_a_stale_mirror_records_no_edit(nodes):
    a, b = nodes
    write_user_md(a, "v1\n")
    b.sync()
    write_user_md(a, "v2\n")
    write_user_md(b, "v3\n")  # takes the lock on b, finds b's mirror stale: no manual_edit
    assert history("user_md") == ["extraction_rebuild"] * 3
    assert b.read("USER.md") == "v3\n"


def test_a_hand_edit_on_one_node_is_captured_once_and_reaches_the_other(nodes):
    a, b = nodes
    b.sync()
    b.edit("SOUL.md", "Edited by hand on b.\n")
    for _ in range(3):  # every heartbeat and compose on both nodes
        a.sync()
        b.sync()
        a.compose()
        b.compose()
    assert history() == ["seed", "manual_edit"]
    edit = ResourceRevision.objects.get(resource_type="soul_md", revision=2)
    assert edit.content == "Edited by hand on b.\n"
    assert edit.provenance["path"] == str(b.path("SOUL.md"))
    assert a.read("SOUL.md") == "Edited by hand on b.\n"
    assert "Edited by hand on b.\n" in [m["content"] for m in a.compose().system_messages]


def test_a_hand_edit_is_seen_by_the_next_compose_on_its_node(nodes):
    a, _ = nodes
    a.compose()
    a.edit("FERMIX.md", "Rules edited by hand.\n")
    prompt = a.compose()
    assert "Rules edited by hand.\n" in [m["content"] for m in prompt.system_messages]
    assert history("fermix_md") == ["seed", "manual_edit"]


def test_two_nodes_editing_between_heartbeats_keep_both_edits_the_later_current(nodes):
    a, b = nodes
    b.sync()
    a.edit("SOUL.md", "Edit on a.\n")
    b.edit("SOUL.md", "Edit on b.\n")
    a.sync()
    b.sync()
    a.sync()
    revisions = list(ResourceRevision.objects.filter(resource_type="soul_md").order_by("revision")
                     .values_list("mutation_source", "content"))
    assert revisions[1:] == [("manual_edit", "Edit on a.\n"), ("manual_edit", "Edit on b.\n")]
    assert a.read("SOUL.md") == b.read("SOUL.md") == "Edit on b.\n"


def test_a_rollback_on_one_node_shows_on_the_other(nodes):
    a, b = nodes
    write_user_md(a, "v1\n")
    write_user_md(a, "v2\n")
    a.compose()
    with b.active():
        resource_rollback(agent_id="main", resource_type="user_md", revision=1)
    assert "v1" in a.compose().system_messages[-1]["content"]
    assert a.read("USER.md") == "v1\n"
    assert history("user_md") == ["extraction_rebuild", "extraction_rebuild", "rollback"]


def test_a_node_without_its_record_takes_an_earlier_revision_for_stale(nodes):
    a, b = nodes
    write_user_md(a, "v1\n")
    b.sync()
    write_user_md(a, "v2\n")
    (b.config.home / "mirrors" / "main.json").unlink()  # the record is gone; the mirror holds v1
    assert b.sync() == []
    assert b.read("USER.md") == "v2\n"
    b.edit("USER.md", "something else\n")
    (b.config.home / "mirrors" / "main.json").unlink()
    assert [r.mutation_source for r in b.sync()] == ["manual_edit"]


def test_a_hand_edit_is_not_lost_when_the_write_that_found_it_fails(nodes):
    from resources.errors import StaleBase
    from resources.soul import soul_apply, soul_propose

    a, _ = nodes
    proposal = None
    with a.active():
        proposal = soul_propose(agent_id="main", mode="review", trust="operator", draft="A draft.\n")
    a.edit("SOUL.md", "Edited by hand after the draft.\n")
    with a.active(), pytest.raises(StaleBase):
        soul_apply(agent_id="main", token=proposal.token, trust="operator")
    assert history() == ["seed"]  # the edit's capture rolled back with the refused apply
    a.sync()
    assert history() == ["seed", "manual_edit"]
    assert a.read("SOUL.md") == "Edited by hand after the draft.\n"


def test_seeding_a_new_node_mirrors_the_current_revisions_and_seeds_nothing(nodes):
    a, b = nodes
    a.edit("SOUL.md", "Owner's soul.\n")
    a.sync()
    with b.active():
        results = bootstrap_seed(agent_id="main")
    assert not any(r.seeded for r in results)
    assert b.read("SOUL.md") == "Owner's soul.\n"
    assert history() == ["seed", "manual_edit"]
