"""The SQL of search filters, shared by the façade and both backends.

A filter is `column: value` (equal), `column: [values]` (one of), `column__isnull: bool`, or a bound on a
time column, `column__gte: datetime` / `column__lt: datetime`.
"""

from __future__ import annotations

from datetime import datetime

from django.db import connection

BOUNDS = {"__gte": ">=", "__lt": "<"}


def column_of(name: str) -> str:
    """The column a filter names (`created_at__gte` → `created_at`)."""
    for suffix in ("__isnull", *BOUNDS):
        if name.endswith(suffix):
            return name[: -len(suffix)]
    return name


def _bound(value):
    return connection.ops.adapt_datetimefield_value(value) if isinstance(value, datetime) else value


def where_sql(alias: str, filters: dict, *, by_key: bool = False) -> tuple[str, list]:
    """SQL for `filters`. `by_key`: rows are found by primary key, so the filters must not pick an index
    (unary `+`): without statistics SQLite would scan `agent_id`'s index instead of looking up 80 ids."""
    clauses, params = [], []
    plus = "+" if by_key and connection.vendor == "sqlite" else ""
    for column, value in filters.items():
        if value is None:
            continue
        bound = next((op for suffix, op in BOUNDS.items() if column.endswith(suffix)), None)
        if column.endswith("__isnull"):
            clauses.append(f"{plus}{alias}.{column[:-8]} IS {'' if value else 'NOT '}NULL")
        elif bound:
            clauses.append(f"{plus}{alias}.{column_of(column)} {bound} %s")
            params.append(_bound(value))
        elif isinstance(value, list | tuple | set):
            if not value:
                clauses.append("1=0")
                continue
            clauses.append(f"{plus}{alias}.{column} IN ({', '.join(['%s'] * len(value))})")
            params.extend(value)
        else:
            clauses.append(f"{plus}{alias}.{column} = %s")
            params.append(value)
    return " AND ".join(clauses) or "1=1", params
