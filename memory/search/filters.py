"""The SQL of search filters, shared by the façade and both backends."""

from __future__ import annotations

from django.db import connection


def where_sql(alias: str, filters: dict, *, by_key: bool = False) -> tuple[str, list]:
    """SQL for `filters`. `by_key`: rows are found by primary key, so the filters must not pick an index
    (unary `+`): without statistics SQLite would scan `agent_id`'s index instead of looking up 80 ids."""
    clauses, params = [], []
    plus = "+" if by_key and connection.vendor == "sqlite" else ""
    for column, value in filters.items():
        if value is None:
            continue
        if column.endswith("__isnull"):
            clauses.append(f"{plus}{alias}.{column[:-8]} IS {'' if value else 'NOT '}NULL")
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
