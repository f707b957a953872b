"""``manage.py place_order ID EMAIL [--fail]``: save an order and enqueue its confirmation
in one transaction; ``--fail`` makes the transaction fail after the enqueue."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from shop.models import Order
from shop.tasks import send_confirmation


class Command(BaseCommand):
    help = "Place an order (and enqueue its confirmation email in the same transaction)."

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("order_id", type=int)
        parser.add_argument("email")
        parser.add_argument("--fail", action="store_true", help="fail the transaction after enqueueing")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            with transaction.atomic():
                Order.objects.create(id=options["order_id"], email=options["email"])
                result = send_confirmation.enqueue(options["order_id"])
                if options["fail"]:
                    raise CommandError("payment failed: the order and its task are rolled back")
        except CommandError as exc:
            self.stdout.write(f"rolled back: {exc}")
            return
        self.stdout.write(f"order {options['order_id']} placed, task {result.id}")
