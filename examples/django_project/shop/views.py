from __future__ import annotations

from django.http import HttpRequest, JsonResponse

from shop.tasks import send_confirmation


def order(request: HttpRequest, order_id: int) -> JsonResponse:
    """GET: the order's confirmation task's result, by the task id given as ?task=."""
    result = send_confirmation.get_result(request.GET["task"])
    return JsonResponse({"order": order_id, "status": str(result.status), "result": result.return_value})
