"""A client for the HTTP API of ``idem serve``: exactly-once effects over
at-least-once delivery. Standard library only, Python >= 3.11.

    from idem_client import Client, idempotent

    client = Client("http://127.0.0.1:7070", token)

    @idempotent(client, biz_type="refund", key=lambda req: req["order_no"])
    def refund(req): ...

See README.md for the client calls, the ``with`` form and the errors.
"""

from ._json import RawJSON, canonical_json, fingerprint_of
from .client import Client
from .decorator import idempotent
from .errors import (
    CachedFailureError,
    Conflict,
    Expired,
    FingerprintMismatch,
    IdemError,
    InProgress,
    InvalidRequest,
    KeyReused,
    LeaseLost,
    NotFound,
    ServerError,
    Unauthorized,
    Unavailable,
)
from .models import (BatchItem, BatchResult, CachedFailure, Claim, ClaimItem, CompleteItem,
                     FailItem, Outcome, Record, Replayed)
from .operation import DEFAULT_RETRYABLE, Operation, current_claim
from .retry import RetryPolicy

__version__ = "0.1.0"

__all__ = [
    "BatchItem",
    "BatchResult",
    "CachedFailure",
    "CachedFailureError",
    "Claim",
    "ClaimItem",
    "Client",
    "CompleteItem",
    "Conflict",
    "DEFAULT_RETRYABLE",
    "Expired",
    "FailItem",
    "FingerprintMismatch",
    "IdemError",
    "InProgress",
    "InvalidRequest",
    "KeyReused",
    "LeaseLost",
    "NotFound",
    "Operation",
    "Outcome",
    "RawJSON",
    "Record",
    "Replayed",
    "RetryPolicy",
    "ServerError",
    "Unauthorized",
    "Unavailable",
    "canonical_json",
    "current_claim",
    "fingerprint_of",
    "idempotent",
]
