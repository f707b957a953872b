"""The shop's tasks, on the django.tasks API (pgqueue's backend runs them)."""

from __future__ import annotations

from typing import Any

try:
    from django.tasks import task  # Django >= 6.0
except ImportError:
    from django_tasks import task  # Django 5.2 + django-tasks

from shop.models import Order


@task(queue_name="emails")
def send_confirmation(order_id: int) -> dict[str, Any]:
    order = Order.objects.get(id=order_id)
    order.confirmed = True
    order.save(update_fields=["confirmed"])
    return {"order": order_id, "mailed": order.email}
