"""``GET /metrics`` of ``deskpod serve``: the route on the service's address (behind its own bearer
token) and the app of the loopback listener (no token), as :class:`.metrics_settings.MetricsSettings` says.

Both answer :meth:`ServiceMetrics.exposition <deskpod.service.server.metrics.ServiceMetrics.exposition>`
in the Prometheus text format; a request to the token's route without that token is refused
with HTTP 401 before anything is read.
"""

from __future__ import annotations

import logging

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route

from deskpod.service.server.metrics import ServiceMetrics
from deskpod.tokens import bearer_refusal

__all__ = ["METRICS_PATH", "metrics_app", "metrics_route"]

log = logging.getLogger(__name__)

METRICS_PATH = "/metrics"
"""Where the metrics are served, on either listener."""


def metrics_route(metrics: ServiceMetrics, token_sha256: str | None) -> Route:
    """The ``GET /metrics`` route answering ``metrics``' exposition.

    Args:
        metrics: the service's metrics.
        token_sha256: SHA-256 (hex) of the bearer token a request must present (HTTP 401 without
            it); ``None``: none (the loopback listener's route).

    Returns:
        The route.
    """

    async def scrape(request: Request) -> Response:
        if token_sha256 is not None:
            refusal = bearer_refusal(request.headers.get("authorization"), token_sha256)
            if refusal is not None:
                log.warning("refused a /metrics request: %s", refusal)
                return PlainTextResponse(f"{refusal}: /metrics needs the metrics token\n", status_code=401,
                                         headers={"WWW-Authenticate": "Bearer"})
        return Response(metrics.exposition(), media_type=CONTENT_TYPE_LATEST)

    return Route(METRICS_PATH, scrape, methods=["GET"])


def metrics_app(metrics: ServiceMetrics) -> Starlette:
    """The app of the loopback listener: ``GET /metrics`` without a token, nothing else (HTTP 404)."""
    return Starlette(routes=[metrics_route(metrics, None)])
