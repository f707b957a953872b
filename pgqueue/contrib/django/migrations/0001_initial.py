"""Installs (and upgrades) pgqueue's schema with ``manage.py migrate``, on the database of
``PGQUEUE["DATABASE"]``: the same migrations as ``pgqueue migrate`` (running both is fine:
they are recorded in pgqueue's own version table and applied once)."""

from __future__ import annotations

from typing import Any, ClassVar

from django.db import migrations


def install(apps: Any, schema_editor: Any) -> None:
    from pgqueue.contrib.django.conf import database_alias, psycopg_connection, schema
    from pgqueue.migrate import migrate

    if schema_editor.connection.alias != database_alias():
        return  # pgqueue lives in another database of the project
    migrate(psycopg_connection(schema_editor.connection.alias), schema())


class Migration(migrations.Migration):
    atomic = False  # pgqueue's migrations take their own transaction and lock
    initial = True
    dependencies: ClassVar[list[tuple[str, str]]] = []
    operations: ClassVar[list[Any]] = [migrations.RunPython(install, migrations.RunPython.noop, elidable=False)]
