"""Model rows read and written with SQL built once, for the statements every live battle runs.

Why: the ORM builds each query anew, every time (the queryset's clones, the lookups resolved, the
SQL compiled, the converters looked up): profiled in-process, the end of a turn and the vote
spent about nine tenths of their CPU there rather than in the database, in the process that
relays every battle's tokens. The statements written with these helpers (by the start, the turn
end and the vote) are built from the models' metadata (table, columns, the backend's quoting
and locking clause) once per process and database vendor, and their rows come back as the
instances the ORM makes: every concrete field, the backend's and the fields' converters
applied, related instances cached where ``select_related`` caches them. What they write goes
through the fields' own ``pre_save`` and ``get_db_prep_save`` as ``save()`` does, so
``auto_now`` fields and JSON adapt alike; ``pre_save`` and ``post_save`` are sent as ``save()``
sends them (nothing, when no receiver listens to the model), and none by ``bulk_insert``, as
by ``bulk_create``.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.db import connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Field, Model
from django.db.models.signals import post_save, pre_save

M = TypeVar("M", bound=Model)
Converter = Callable[[Any, Any, BaseDatabaseWrapper], Any]

_built: dict[tuple[str, object], Any] = {}
_building = threading.Lock()


def built(connection: BaseDatabaseWrapper, key: object, build: Callable[[], Any]) -> Any:
    """``build()`` once per database vendor and ``key`` (a statement's SQL, a column list)."""
    cache_key = (connection.vendor, key)
    found = _built.get(cache_key)
    if found is None:
        with _building:
            found = _built.get(cache_key)
            if found is None:
                found = _built[cache_key] = build()
    return found


def quote(connection: BaseDatabaseWrapper, name: str | None) -> str:
    """``name`` (a table, a column, an alias) quoted for the backend."""
    assert name  # noqa: S101  (a field's column is typed optional; every concrete one has one)
    return str(connection.ops.quote_name(name))


def table(connection: BaseDatabaseWrapper, model: type[Model]) -> str:
    return quote(connection, model._meta.db_table)


def column(connection: BaseDatabaseWrapper, model: type[Model], name: str) -> str:
    """The quoted column of ``model``'s field ``name`` (its attname for a foreign key)."""
    field = model._meta.get_field(name)
    assert isinstance(field, Field) and field.column  # noqa: S101
    return quote(connection, field.column)


class Names:
    """One backend's quoted names, for a statement written by hand: ``q`` an alias, ``table`` a
    model's table, ``col`` a model's field's column."""

    def __init__(self, connection: BaseDatabaseWrapper) -> None:
        self.connection = connection

    def q(self, name: str) -> str:
        return quote(self.connection, name)

    def table(self, model: type[Model]) -> str:
        return table(self.connection, model)

    def col(self, model: type[Model], name: str) -> str:
        return column(self.connection, model, name)


def for_update_of(connection: BaseDatabaseWrapper, alias: str) -> str:
    """``FOR UPDATE OF alias`` where the backend locks rows (PostgreSQL), else nothing
    (SQLite's transactions already serialise writers): what ``select_for_update(of=...)`` adds."""
    features = connection.features
    if not features.has_select_for_update:
        return ""
    of = (quote(connection, alias),) if features.has_select_for_update_of else ()
    return " " + str(connection.ops.for_update_sql(of=of))


class Columns:
    """Every concrete column of ``model`` under the table alias ``alias``, for a SELECT list,
    and an instance of ``model`` made back from the values at an offset of a row."""

    def __init__(self, model: type[M], alias: str) -> None:
        self.model = model
        self.alias = alias
        self.fields: list[Field[Any, Any]] = list(model._meta.concrete_fields)
        self.attnames = [field.attname for field in self.fields]
        self.width = len(self.fields)

    def sql(self, connection: BaseDatabaseWrapper) -> str:
        alias = quote(connection, self.alias)
        return ", ".join(f"{alias}.{quote(connection, field.column)}" for field in self.fields)

    def _converters(
        self, connection: BaseDatabaseWrapper
    ) -> list[tuple[int, list[Converter], Any]]:
        # As the SQL compiler gathers them (SQLCompiler.get_converters): the backend's, then the
        # field's own (a JSON field's parse), with the column as the expression they are given.
        found = []
        for index, field in enumerate(self.fields):
            col = field.get_col(self.alias)
            converters = [
                *connection.ops.get_db_converters(col),
                *col.get_db_converters(connection),
            ]
            if converters:
                found.append((index, converters, col))
        return found

    def load(self, connection: BaseDatabaseWrapper, row: Sequence[Any], start: int = 0) -> Any:
        """The instance whose values are ``row[start:start + width]``."""
        values = list(row[start : start + self.width])
        # Bound to the first connection that asks (they read only the backend's settings).
        for index, converters, col in built(
            connection, ("converters", self), lambda: self._converters(connection)
        ):
            value = values[index]
            for convert in converters:
                value = convert(value, col, connection)
            values[index] = value
        return self.model.from_db(connection.alias, self.attnames, values)


def cache_related(instance: Model, name: str, related: Model | None) -> None:
    """Cache ``related`` as ``instance.<name>`` (a forward foreign key), as ``select_related``
    does, so that reading it runs no query."""
    field = instance._meta.get_field(name)
    field.set_cached_value(instance, related)  # type: ignore[union-attr]


def update_fields(instances: Sequence[Model], names: Sequence[str], *, using: str) -> None:
    """``instance.save(update_fields=names)`` for each instance (of one model), as one statement
    run for all of them: each field's ``pre_save`` (``auto_now`` sets the time on the instance
    too) and ``get_db_prep_save`` give the value written."""
    if not instances:
        return
    connection = connections[using]
    model = type(instances[0])
    meta = model._meta
    fields = [meta.get_field(name) for name in names]

    def build() -> str:
        assigned = ", ".join(f"{column(connection, model, name)} = %s" for name in names)
        pk = quote(connection, meta.pk.column)
        return f"UPDATE {table(connection, model)} SET {assigned} WHERE {pk} = %s"  # noqa: S608

    sql = built(connection, ("update", model, tuple(names)), build)
    pk_field = meta.pk
    assert pk_field is not None  # noqa: S101
    changed = frozenset(names)
    for instance in instances:
        pre_save.send(
            sender=model, instance=instance, raw=False, using=using, update_fields=changed
        )
    rows = [
        [
            *(
                field.get_db_prep_save(field.pre_save(instance, False), connection)  # type: ignore[union-attr]
                for field in fields
            ),
            pk_field.get_db_prep_value(instance.pk, connection),
        ]
        for instance in instances
    ]
    with connection.cursor() as cursor:
        if len(rows) == 1:
            cursor.execute(sql, rows[0])
        else:
            cursor.executemany(sql, rows)
    for instance in instances:
        post_save.send(
            sender=model,
            instance=instance,
            created=False,
            update_fields=changed,
            raw=False,
            using=using,
        )


def _insert_fields(model: type[Model], *, key_set: bool) -> list[Field[Any, Any]]:
    """The columns Django's insert writes: every local concrete one, the auto key only if set."""
    meta = model._meta
    returning = meta.db_returning_fields
    # A model whose database fills other columns than its auto key is not written here.
    assert all(f is meta.auto_field for f in returning)  # noqa: S101
    fields = [f for f in meta.local_concrete_fields if not f.generated]
    if not key_set:
        fields = [f for f in fields if f is not meta.auto_field]
    return fields


def _insert_sql(
    connection: BaseDatabaseWrapper, model: type[Model], fields: list[Field[Any, Any]], count: int
) -> str:
    names = ", ".join(quote(connection, f.column) for f in fields)
    marks = "(" + ", ".join(["%s"] * len(fields)) + ")"
    sql = f"INSERT INTO {table(connection, model)} ({names}) VALUES {', '.join([marks] * count)}"  # noqa: S608
    auto = model._meta.auto_field
    if auto is not None and auto not in fields:
        sql += f" RETURNING {quote(connection, auto.column)}"
    return sql


def _insert(instances: Sequence[Model], *, using: str) -> None:
    connection = connections[using]
    model = type(instances[0])
    meta = model._meta
    key_set = instances[0].pk is not None
    fields = _insert_fields(model, key_set=key_set)
    sql = built(
        connection,
        ("insert", model, key_set, len(instances)),
        lambda: _insert_sql(connection, model, fields, len(instances)),
    )
    params = [
        f.get_db_prep_save(f.pre_save(instance, True), connection)
        for instance in instances
        for f in fields
    ]
    auto = meta.auto_field
    returns = auto is not None and auto not in fields
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        keys = cursor.fetchall() if returns else []
    if returns:
        assert auto is not None  # noqa: S101
        col = auto.get_col(meta.db_table)
        converters = [*connection.ops.get_db_converters(col), *col.get_db_converters(connection)]
        # PostgreSQL and SQLite return the rows of a multi-row VALUES in its order, which
        # bulk_create relies on too.
        for instance, (value,) in zip(instances, keys, strict=True):
            for convert in converters:
                value = convert(value, col, connection)
            setattr(instance, auto.attname, value)
    for instance in instances:
        instance._state.adding = False
        instance._state.db = using


def _inserts_here(connection: BaseDatabaseWrapper, model: type[Model]) -> bool:
    """Whether ``_insert`` can write ``model``'s rows: a key the database assigns is read back
    with ``RETURNING`` (PostgreSQL; SQLite 3.35+)."""
    return model._meta.auto_field is None or bool(
        connection.features.can_return_columns_from_insert
    )


def insert(instance: Model, *, using: str) -> None:
    """``instance.save(force_insert=True)`` for a new row: ``pre_save``, each field's
    ``pre_save`` (``auto_now_add``) and ``get_db_prep_save``, the auto key read back, then
    ``post_save``, as Django's insert does."""
    model = type(instance)
    if not _inserts_here(connections[using], model):
        instance.save(force_insert=True, using=using)
        return
    pre_save.send(sender=model, instance=instance, raw=False, using=using, update_fields=None)
    _insert([instance], using=using)
    post_save.send(
        sender=model, instance=instance, created=True, update_fields=None, raw=False, using=using
    )


def bulk_insert(instances: Sequence[Model], *, using: str) -> None:
    """``Model.objects.bulk_create(instances)`` of a few new rows of one model, in one
    statement: no signal, auto keys read back, as ``bulk_create`` does on PostgreSQL."""
    if not instances:
        return
    model = type(instances[0])
    if not _inserts_here(connections[using], model):
        model._default_manager.using(using).bulk_create(instances)
        return
    _insert(instances, using=using)
