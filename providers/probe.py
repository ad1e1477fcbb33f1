"""Whether a provider answers at all: one cheap, untraced `GET <base_url>/models` with a short timeout.

Listing models costs no tokens on any vendor, and it sends the same key the chat call sends, so a
refused key shows here too. A server without the listing (404, 405) still answered: it is reachable.
"""

from __future__ import annotations

from dataclasses import dataclass

import httpx

from fermix_site.conf import ProviderConf
from providers import openai
from providers.base import ChatRequest
from providers.chain import ADAPTERS
from providers.transport import error_text

PING = ChatRequest(messages=[{"role": "user", "content": "ping"}], max_tokens=1)
KEY_REFUSED = {401, 403}


@dataclass(frozen=True)
class Probe:
    provider: str
    url: str
    reachable: bool
    message: str
    status: int | None = None


def models_url(provider: ProviderConf) -> str:
    return openai.versioned(provider.base_url) + "/models"


def provider_probe(provider: ProviderConf, *, timeout_s: float = 3.0) -> Probe:
    """Ask `provider` for its model list; `reachable` is false when it did not answer or refused the key."""
    url = models_url(provider)
    if provider.api_key_env and not provider.api_key:
        return Probe(provider.name, url, False, f"environment variable {provider.api_key_env} (api_key_env) is "
                     "not set")
    _, headers, _ = ADAPTERS[provider.kind].build(provider, PING)
    try:
        response = httpx.get(url, headers=headers, timeout=timeout_s, follow_redirects=False)
    except httpx.TimeoutException:
        return Probe(provider.name, url, False, f"no answer within {timeout_s:g} s")
    except httpx.RequestError as exc:
        return Probe(provider.name, url, False, f"{type(exc).__name__}: {exc or 'no answer'}")
    status = response.status_code
    if status in KEY_REFUSED:
        return Probe(provider.name, url, False, f"refused the key (HTTP {status}: {error_text(response.content)})",
                     status)
    if status >= 500:
        return Probe(provider.name, url, False, f"HTTP {status}: {error_text(response.content)}", status)
    return Probe(provider.name, url, True, f"answers (HTTP {status})", status)
