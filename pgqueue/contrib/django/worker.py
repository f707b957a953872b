"""The target of ``manage.py pgqueue_work`` (``pgqueue work pgqueue.contrib.django.worker:app``):
the Django project's pgqueue app. Sets Django up when a worker process starts on its own
(``--processes N``), from ``$DJANGO_SETTINGS_MODULE``."""

from __future__ import annotations

import django
from django.apps import apps

if not apps.ready:
    django.setup()

from .runtime import get_app  # after django.setup()

app = get_app()
