"""Settings of the pgqueue example project: the database comes from $PGQUEUE_DSN."""

from __future__ import annotations

import importlib.util
import os

from psycopg.conninfo import conninfo_to_dict

_db = conninfo_to_dict(os.environ["PGQUEUE_DSN"])

SECRET_KEY = "example-only"
DEBUG = True
USE_TZ = True
ALLOWED_HOSTS = ["*"]
ROOT_URLCONF = "mysite.urls"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "pgqueue.contrib.django",
    "shop",
    # Django 5.2 takes the django.tasks API from the django-tasks package.
    *(["django_tasks"] if importlib.util.find_spec("django.tasks") is None else []),
]

DATABASES = {
    "default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": _db.get("dbname", ""),
        "USER": _db.get("user", ""),
        "PASSWORD": _db.get("password", ""),
        "HOST": _db.get("host", ""),
        "PORT": _db.get("port", ""),
    }
}

TASKS = {
    "default": {
        "BACKEND": "pgqueue.contrib.django.backend.PgQueueBackend",
        "QUEUES": ["default", "emails"],
    }
}

PGQUEUE = {"DATABASE": "default", "SCHEMA": "pgqueue"}
