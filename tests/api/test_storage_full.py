"""A full database answers `507 storage_full` and writes nothing; reads still answer; writes work again once
there is room. The database really is full on both backends: SQLite at its `max_page_count` with no free
page left, PostgreSQL's messages table on a tablespace on a full tmpfs (the server reports `disk_full`,
SQLSTATE 53100, as it would for a full disk)."""

from __future__ import annotations

import errno
import sqlite3
import tempfile
from pathlib import Path

import psycopg.errors
import pytest
from django.db import OperationalError, connection

from api.errors import status_of
from memory.models import Conversation, Message
from tests.personas import error_of
from tests.tmpfs import fill, mount_tmpfs, unmount

pytestmark = [pytest.mark.django_db(transaction=True)]

APPEND = "/agents/main/conversations/telegram:1/messages"
# Bigger than a page: a full SQLite file may still fit a short row into a page's unused bytes.
NO_ROOM = {"role": "user", "content": "a message with no room left " * 400}
TABLESPACE = "fermix_test_storage_full"


def _query(sql: str, params=()):
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone() if cursor.description else None


def _fill_sqlite() -> None:
    """Cap the file at its size, then take every free page with a filler row."""
    _query("CREATE TABLE storage_filler (data BLOB)")
    _query(f"PRAGMA max_page_count = {_query('PRAGMA page_count')[0]}")
    for size in (1 << 20, 1 << 16, 1 << 12, 1 << 8, 1):
        while True:
            try:
                _query("INSERT INTO storage_filler VALUES (zeroblob(%s))", [size])
            except OperationalError:
                break


def _full_sqlite():
    limit = _query("PRAGMA max_page_count")[0]
    _fill_sqlite()

    def free():
        _query("DROP TABLE IF EXISTS storage_filler")
        _query(f"PRAGMA max_page_count = {limit}")

    try:
        yield free
    finally:
        free()


def _full_postgres():
    folder = Path(tempfile.mkdtemp(prefix="fermix-tablespace-"))
    try:
        mount_tmpfs(folder, "512k", owner="postgres")  # the server writes there as its own user
    except BaseException:
        folder.rmdir()
        raise
    table = Message._meta.db_table
    try:
        _query(f"CREATE TABLESPACE {TABLESPACE} LOCATION '{folder}'")
        # Empty on disk too (earlier tests' rolled-back rows leave pages an insert could reuse), then moved.
        _query(f'TRUNCATE "{table}" CASCADE')
        _query(f'ALTER TABLE "{table}" SET TABLESPACE {TABLESPACE}')
        filler = fill(folder)
        yield lambda: filler.unlink(missing_ok=True)
    finally:
        _query(f'ALTER TABLE "{table}" SET TABLESPACE pg_default')
        _query(f"DROP TABLESPACE IF EXISTS {TABLESPACE}")
        unmount(folder)
        folder.rmdir()


@pytest.fixture
def full_database():
    """The database with no room for another message; calling the fixture's value makes room again."""
    yield from (_full_sqlite() if connection.vendor == "sqlite" else _full_postgres())


def test_an_append_to_a_full_database_is_507_storage_full_and_stores_nothing(operator, full_database):
    response = operator.post(APPEND, NO_ROOM)
    assert error_of(response) == (507, "storage_full")
    assert "full" in response.json()["error"]["message"]
    full_database()
    assert not Message.objects.exists() and not Conversation.objects.exists()  # nothing half-written
    print(f"\n{connection.vendor}, database full: the append answered 507 storage_full; 0 messages and 0 "
          "conversations stored")


def test_reads_still_answer_while_the_database_is_full(operator, full_database):
    assert operator.get("/agents/main/memories").status_code == 200
    assert operator.get("/agents/main/resources").status_code == 200


def test_appends_work_again_once_there_is_room(operator, full_database):
    assert operator.post(APPEND, NO_ROOM).status_code == 507
    full_database()
    response = operator.post(APPEND, NO_ROOM)
    assert response.status_code == 201
    assert list(Message.objects.values_list("id", flat=True)) == [response.json()["id"]]


def _sqlite_full_error() -> sqlite3.Error:
    """A real SQLITE_FULL from the sqlite3 module (a database capped at one page)."""
    db = sqlite3.connect(":memory:")
    db.execute("CREATE TABLE t (x)")
    db.execute(f"PRAGMA max_page_count = {db.execute('PRAGMA page_count').fetchone()[0]}")
    try:
        db.execute("INSERT INTO t VALUES (zeroblob(100000))")
    except sqlite3.Error as exc:
        return exc
    raise AssertionError("the capped database took the row")


def _wrapped(cause: Exception) -> OperationalError:
    """As Django raises a driver's error: its own class, raised from the driver's."""
    try:
        raise OperationalError(str(cause)) from cause
    except OperationalError as exc:
        return exc


@pytest.mark.parametrize("make, expected", [
    (lambda: OSError(errno.ENOSPC, "No space left on device"), 507),
    (lambda: OSError(errno.EDQUOT, "Disk quota exceeded"), 507),
    (_sqlite_full_error, 507),
    (lambda: _wrapped(_sqlite_full_error()), 507),
    # PostgreSQL's disk_full class as psycopg raises it, bare and as Django wraps it.
    (lambda: psycopg.errors.DiskFull("could not extend file: No space left on device"), 507),
    (lambda: _wrapped(psycopg.errors.DiskFull("could not extend file")), 507),
    (lambda: OSError(errno.EACCES, "Permission denied"), 500),
    (lambda: _wrapped(sqlite3.OperationalError("database is locked")), 500),
    (lambda: psycopg.errors.OutOfMemory("out of memory"), 500),
])
def test_every_shape_of_a_full_storage_maps_to_507_and_nothing_else_does(make, expected):
    status, code, _ = status_of(make())
    assert (status, code) == ((507, "storage_full") if expected == 507 else (500, "internal_error"))
