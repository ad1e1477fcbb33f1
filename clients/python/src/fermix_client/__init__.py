"""A Python client for the Fermix memory service (`/api/v1/`): `Client` (blocking) and `AsyncClient`."""

from fermix_client._calls import Call, RetryPolicy
from fermix_client.client import AsyncClient, Client
from fermix_client.errors import (
    APIError,
    Conflict,
    FermixError,
    Forbidden,
    InvalidInput,
    ModelUnavailable,
    NotFound,
    PayloadTooLarge,
    RateLimited,
    ServerError,
    StorageFull,
    TransportError,
    Unauthorized,
)

__all__ = [
    "APIError", "AsyncClient", "Call", "Client", "Conflict", "FermixError", "Forbidden", "InvalidInput",
    "ModelUnavailable", "NotFound", "PayloadTooLarge", "RateLimited", "RetryPolicy", "ServerError", "StorageFull",
    "TransportError", "Unauthorized",
]
__version__ = "0.1.0"
