"""The Django app of pgqueue's integration: add ``"pgqueue.contrib.django"`` to
``INSTALLED_APPS`` for its migration and management commands."""

from __future__ import annotations

from django.apps import AppConfig


class PgQueueConfig(AppConfig):
    name = "pgqueue.contrib.django"
    label = "pgqueue"
    verbose_name = "pgqueue"
