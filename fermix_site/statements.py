"""Statements of the hot paths, written once instead of built by the ORM on every call.

Building an INSERT of a model with twenty fields cost more than running it: a message append, a
review's row, its event, its operation and its run each paid that. `PreparedInsert(Model)` writes the
statement once (portable SQL: SQLite and PostgreSQL both return the new id) and prepares each value
with its own field, as the ORM does: defaults are set when the instance is made, `auto_now` and
`auto_now_add` by `pre_save`, JSON and dates by `get_db_prep_save`. No model signal is sent; the
project connects none to these models.

`first_row` runs a written-out SELECT of whole rows through `Manager.raw`, which builds the instance
(with the fields' conversions) without building the query.
"""

from __future__ import annotations

from django.db import connection


class PreparedInsert:
    """One model's INSERT of every concrete field but its primary key."""

    def __init__(self, model):
        self.fields = [field for field in model._meta.concrete_fields if not field.primary_key]
        self.sql = 'INSERT INTO "{}" ({}) VALUES ({}) RETURNING "{}"'.format(
            model._meta.db_table, ", ".join(f'"{field.column}"' for field in self.fields),
            ", ".join(["%s"] * len(self.fields)), model._meta.pk.column)

    def __call__(self, instance):
        """Insert `instance` and set its primary key; returns it, saved as `create` leaves it."""
        values = [field.get_db_prep_save(field.pre_save(instance, True), connection) for field in self.fields]
        with connection.cursor() as cursor:
            cursor.execute(self.sql, values)
            instance.pk = cursor.fetchone()[0]
        instance._state.adding, instance._state.db = False, connection.alias
        return instance


def first_row(model, sql: str, params: list, *, lock: bool = False):
    """The first row `sql` (a SELECT of the model's columns) returns, or None. `lock`: the row stays
    locked until the transaction ends where the database locks rows (PostgreSQL: FOR UPDATE; SQLite's
    IMMEDIATE transaction already holds the write lock)."""
    if lock and connection.features.has_select_for_update:
        sql += " FOR UPDATE"
    for row in model.objects.raw(sql, params):
        return row
    return None
