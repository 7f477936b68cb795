"""Webhook deliveries over HTTP (httpx): one POST, no redirect followed, bounded by a timeout."""

from __future__ import annotations

from collections.abc import Mapping

import httpx

from om_core.application.webhooks import WebhookDeliveryError, WebhookSender

DEFAULT_TIMEOUT_SECONDS = 10.0


class HttpWebhookSender(WebhookSender):
    def __init__(self, timeout: float = DEFAULT_TIMEOUT_SECONDS) -> None:
        # a redirect would send a signed body somewhere the profile does not name
        self._client = httpx.Client(timeout=timeout, follow_redirects=False)

    def post(self, url: str, body: bytes, headers: Mapping[str, str]) -> int:
        try:
            return self._client.post(url, content=body, headers=dict(headers)).status_code
        except httpx.HTTPError as error:
            raise WebhookDeliveryError(f"{url}: {type(error).__name__}: {error}") from error

    def close(self) -> None:
        self._client.close()
