"""memory_export and memory_import stream JSON Lines: the commands' round trip, progress, refusals."""

import json

import pytest
from django.core.management import CommandError, call_command

from fermix_site.conf import conf
from fermix_site.storage import free_bytes
from memory import portability
from memory.conversations import message_append
from memory.models import Conversation, Memory, MemoryEvent, MemorySource, Message, ReviewRun, ReviewState
from providers.models import ModelCall
from resources.models import Resource, ResourceRevision
from tests.fakeprovider import use_config
from tests.memory.test_erasure_export import populate
from tests.tmpfs import mount_tmpfs, unmount

pytestmark = pytest.mark.django_db

EXPORTED = (MemoryEvent, Memory, ReviewRun, MemorySource, ReviewState, Message, Conversation, ResourceRevision,
            Resource, ModelCall)


def empty_install():
    for model in EXPORTED:
        model.objects.all().delete()


def rows(path):
    return [json.loads(line) for line in path.read_text().splitlines()[1:-1]]


def test_the_commands_round_trip_through_a_file_in_batches(home, monkeypatch, capsys):
    monkeypatch.setattr(portability, "BATCH", 3)  # several batches per table
    populate()
    for n in range(7):
        message_append(agent_id="main", conversation="telegram:1", role="user", content=f"note {n}",
                       trust="operator")
    call_command("memory_export", "--output", "main.jsonl", "--every", "5")
    path = conf.home / "exports" / "main.jsonl"
    before = rows(path)
    err = capsys.readouterr().err.splitlines()
    counts = [int(line.split()[1].split("/")[0]) for line in err if line.startswith("exported ")]
    # A line each time another 5 rows are done (batches of 3 cross the marks unevenly), then the total.
    assert [n // 5 for n in counts[:-1]] == list(range(1, len(before) // 5 + 1)) and counts[-1] == len(before)
    assert err[-1].startswith(f"wrote {len(before)} row(s)")
    empty_install()
    call_command("memory_import", str(path), "--json", "--every", "5")
    report = json.loads(capsys.readouterr().out)
    assert report["imported"]["memory.message"] == Message.objects.count() == 11
    call_command("memory_export", "--output", "again.jsonl")
    assert rows(conf.home / "exports" / "again.jsonl") == before


def test_a_cut_off_export_is_refused_and_nothing_is_written(home, tmp_path):
    populate()
    lines = portability.export_lines(agent_id="main")
    whole = list(lines)
    empty_install()
    cut = tmp_path / "cut.jsonl"
    cut.write_text("\n".join(whole[:-1]) + "\n")
    with pytest.raises(CommandError, match="cut off"):
        call_command("memory_import", str(cut))
    assert Message.objects.count() == 0
    wrong = tmp_path / "wrong.jsonl"
    wrong.write_text("\n".join([*whole[:-1], '{"rows": 1}']) + "\n")
    with pytest.raises(CommandError, match="says 1 rows but holds"):
        call_command("memory_import", str(wrong))
    assert Message.objects.count() == 0


def test_a_taken_id_in_a_late_batch_writes_nothing(home, monkeypatch):
    monkeypatch.setattr(portability, "BATCH", 2)
    populate()
    whole = list(portability.export_lines(agent_id="main"))
    for model in EXPORTED:
        if model is not ResourceRevision and model is not Resource:
            model.objects.all().delete()
    with pytest.raises(portability.PortabilityError) as caught:
        portability.memory_import_lines(whole)
    assert caught.value.code == "not_empty" and "resources." in str(caught.value)
    assert Message.objects.count() == 0 and Memory.objects.count() == 0


def test_a_version_2_document_file_still_imports(home, tmp_path, capsys):
    populate()
    document = portability.memory_export(agent_id="main")
    old = {**document, "version": 2,
           "objects": [o for o in document["objects"] if o["model"] in ("memory.conversation", "memory.message")]}
    empty_install()
    path = tmp_path / "old.json"
    path.write_text(json.dumps(old, indent=2))
    call_command("memory_import", str(path))
    assert "Imported 2 memory.conversation, 4 memory.message" in capsys.readouterr().out
    assert Message.objects.count() == 4


def test_a_file_that_is_not_an_export_is_refused(home, tmp_path):
    path = tmp_path / "x.jsonl"
    path.write_text('{"format": "fermix-export", "version": 3}\n{"model": "auth.user", "pk": 1, "fields": {}}\n')
    with pytest.raises(CommandError, match="objects must be rows of"):
        call_command("memory_import", str(path))
    path.write_text("hello\n")
    with pytest.raises(CommandError, match="not a Fermix export"):
        call_command("memory_import", str(path))


def test_an_owner_export_carries_the_model_calls_of_their_conversations_only(home):
    populate()
    for key, agent in (("telegram:1:root", "main"), ("slack:9:root", "main"), ("telegram:1:root", "other")):
        ModelCall.objects.create(call_id=f"{agent}-{key}", agent_id=agent, agent_tag="turn", conversation_key=key,
                                 provider="primary", kind="openai", model="m", outcome="ok")
    calls = [o["fields"]["call_id"] for o in portability.memory_export(owner_id="bo")["objects"]
             if o["model"] == "providers.modelcall"]
    assert calls == ["main-slack:9:root"]
    calls = [o["fields"]["call_id"] for o in portability.memory_export(agent_id="main")["objects"]
             if o["model"] == "providers.modelcall"]
    assert calls == ["main-telegram:1:root", "main-slack:9:root"]


@pytest.fixture
def small_exports(home):
    """`$FERMIX_HOME/exports` on an 8 MiB disk of its own."""
    folder = conf.home / "exports"
    mount_tmpfs(folder, "8m")
    yield folder
    unmount(folder)


def test_an_export_stops_before_it_takes_the_room_kept_for_the_service(small_exports, capsys):
    for n in range(30):  # about 3 MB of export
        message_append(agent_id="main", conversation="telegram:1", role="user", content=f"{n} " + "x" * 100_000,
                       trust="operator")
    with use_config("[fermix_core.storage]\nmin_free_mb = 6\n"), pytest.raises(CommandError) as caught:
        call_command("memory_export", "--output", "main.jsonl")  # 2 MiB of the 8 may be written
    assert "the export stopped and nothing was written" in str(caught.value)
    assert "less than the 6 MiB kept free" in str(caught.value) and "standard output" in str(caught.value)
    assert list(small_exports.iterdir()) == [] and free_bytes(small_exports) == 8 * 2**20  # no part left behind
    with use_config("[fermix_core.storage]\nmin_free_mb = 1\n"):
        call_command("memory_export", "--output", "main.jsonl")
    exported = rows(small_exports / "main.jsonl")
    assert sum(row["model"] == "memory.message" for row in exported) == 30
    print(f"export of {(small_exports / 'main.jsonl').stat().st_size:,} bytes on an 8 MiB disk: "
          f"refused whole with 6 MiB kept free, written with 1 MiB kept free")
