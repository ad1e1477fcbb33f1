"""`memory_review --now`: every conversation or one, JSON or text, and its errors."""

import json

import pytest
from django.core.management import call_command

from memory.reviewer import review_now
from tests.fakeprovider import Reply, error
from tests.memory.reviewer.conftest import say
from tests.personas import ops

pytestmark = pytest.mark.django_db


def test_review_now_walks_conversations_and_prints_json(model, capsys):
    say("I like tea")
    say("I like chess", conversation="slack:2")
    say("guest only", conversation="slack:3", trust="guest")
    model.responder = lambda request: Reply(text="Nothing to save.")
    call_command("memory_review", "--now", "--json")
    report = json.loads(capsys.readouterr().out)
    assert report["total"] == 2
    assert [r["conversation"] for r in report["results"]] == ["slack:2:root", "telegram:1:root"]
    assert set(report["results"][0]) == {"conversation", "status", "reason", "ops_added", "ops_replaced",
                                         "ops_archived", "ops_skipped", "input_messages", "input_tokens", "run_id",
                                         "skipped_by_code"}
    say("more tea")
    call_command("memory_review", "--now", "--conversation", "telegram:1")
    out = capsys.readouterr().out
    assert "[1/1] telegram:1:root: nothing_to_save" in out and "Reviewed 1 conversation(s): 1 nothing_to_save" in out
    assert review_now(agent_id="main", conversation="telegram:1")["results"][0]["reason"] == "no_new_messages"


def test_the_json_report_says_why_operations_were_skipped(model, capsys):
    say("I like tea, and what is the weather like?")
    model.push(ops({"op": "add", "category": "preference", "key": "drink", "value": "likes tea"},
                   {"op": "add", "category": "preference", "key": "drink_again", "value": "likes tea"},
                   {"op": "add", "category": "context", "key": "weather", "value": "what is the weather like?"},
                   {"op": "shout", "value": "x"}))
    call_command("memory_review", "--now", "--json")
    result = json.loads(capsys.readouterr().out)["results"][0]
    assert result["ops_added"] == 1 and result["ops_skipped"] == 3
    assert result["skipped_by_code"] == {"duplicate": 1, "question": 1, "unknown_op": 1}


def test_review_command_errors(model):
    from django.core.management import CommandError

    with pytest.raises(CommandError, match="conversation key"):
        call_command("memory_review", "--now", "--conversation", "bad key")
    with pytest.raises(CommandError, match="--agent"):
        call_command("memory_review", "--now", "--agent", "../x")
    say("I like tea")
    model.push(error(400, "bad request"))
    with pytest.raises(CommandError, match="1 review\\(s\\) failed"):
        call_command("memory_review", "--now")


def test_a_failed_review_fails_the_command_with_json_too(model, capsys):
    from django.core.management import CommandError

    say("I like tea")
    say("I like chess", conversation="slack:2")
    model.push(error(400, "bad request"))
    model.responder = lambda request: Reply(text="Nothing to save.")
    with pytest.raises(CommandError, match="1 review\\(s\\) failed; see the reasons in the JSON above"):
        call_command("memory_review", "--now", "--json")
    report = json.loads(capsys.readouterr().out)
    assert sorted(r["status"] for r in report["results"]) == ["failed", "nothing_to_save"]
    assert "provider primary (" in next(r["reason"] for r in report["results"] if r["status"] == "failed")
