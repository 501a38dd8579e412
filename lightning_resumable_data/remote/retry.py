"""Retries of remote requests: bounded tries, exponential backoff with jitter, no retry storms.

A request that fails with a *transient* error (connection refused or reset, a timeout, a
transfer cut short, HTTP 429 or 5xx) is retried after ``min(cap, base * 2**attempt)``
seconds scaled by a random factor in ``[0.5, 1]`` (jitter keeps the ranks of a restarted job
from hammering the server in lockstep). A *permanent* error (403, 404, a malformed request,
an integrity failure) is raised at once: retrying it cannot help and would multiply the load
on a server that already said no. After the last attempt, :class:`RemoteReadError` names the
URL, the number of attempts and the last error.

Example:
    >>> calls = []
    >>> def flaky():
    ...     calls.append(1)
    ...     if len(calls) < 3:
    ...         raise ConnectionResetError("reset by peer")
    ...     return "ok"
    >>> with_retries(flaky, "s3://b/k", RetryPolicy(attempts=5, base_s=0.001)), len(calls)
    ('ok', 3)
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from lightning_resumable_data.remote.urls import redact

__all__ = ["RemoteReadError", "RetryPolicy", "is_transient", "with_retries"]

T = TypeVar("T")

_TRANSIENT_NAMES = (
    "connect", "timeout", "throttl", "slowdown", "unavailable", "reset",
    "payload", "incomplete", "truncat", "contentlength", "streaming",
)  # fmt: skip


class RemoteReadError(OSError):
    """A remote object could not be read after every retry (the message names the URL)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class RetryPolicy:
    """How often and how patiently to retry a transient failure.

    Every try is bounded in time, so a server that accepts a connection and never answers
    (or stops sending halfway) surfaces as a :class:`RemoteReadError` after at most
    ``attempts * timeout_s`` plus the delays (about 6 minutes with the defaults), never a
    hang.

    Attributes:
        attempts: Tries in all (1 means no retry).
        base_s: Delay before the first retry, doubled for each next one.
        cap_s: Longest delay between two tries.
        timeout_s: Longest time one try may take, connecting included: a stat, a listing
            or a GET of at most 64 MiB. A slower try is cancelled (its connection closed)
            and counts as a transient failure.
        connect_timeout_s: Longest wait for a connection, where the backend has the
            setting (HTTP(S) and S3); a host that drops connection attempts fails this fast.
    """

    attempts: int = 6
    base_s: float = 0.25
    cap_s: float = 8.0
    timeout_s: float = 60.0
    connect_timeout_s: float = 10.0

    def __post_init__(self) -> None:
        if isinstance(self.attempts, bool) or not isinstance(self.attempts, int):
            raise TypeError(f"attempts={self.attempts!r} must be an int.")
        if self.attempts < 1 or self.base_s < 0 or self.cap_s < 0:
            raise ValueError(
                f"RetryPolicy(attempts={self.attempts}, base_s={self.base_s}, "
                f"cap_s={self.cap_s}): attempts must be >= 1 and the delays >= 0."
            )
        if not (self.timeout_s > 0 and self.connect_timeout_s > 0):  # NaN fails too
            raise ValueError(
                f"RetryPolicy(timeout_s={self.timeout_s}, connect_timeout_s="
                f"{self.connect_timeout_s}): both must be > 0 seconds; a request without a "
                "bound can hang a job forever."
            )

    def delay(self, attempt: int) -> float:
        """Seconds to wait after failed try number ``attempt`` (0-based), with jitter."""
        return min(self.cap_s, self.base_s * 2.0**attempt) * random.uniform(0.5, 1.0)


def _status(error: BaseException) -> int | None:
    for name in ("status", "status_code", "code"):
        value = getattr(error, name, None)
        if isinstance(value, int) and 100 <= value < 600:
            return value
    response = getattr(error, "response", None)  # botocore ClientError
    if isinstance(response, dict):
        value = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
        if isinstance(value, int):
            return value
    return None


def is_transient(error: BaseException) -> bool:
    """Whether retrying ``error`` may succeed (network trouble, a cut transfer, 429, 5xx).

    Example:
        >>> is_transient(ConnectionRefusedError()), is_transient(FileNotFoundError("k"))
        (True, False)
    """
    if isinstance(error, (FileNotFoundError, PermissionError, IsADirectoryError, ValueError)):
        return False
    status = _status(error)
    if status is not None:
        return status == 429 or status >= 500
    if isinstance(error, (ConnectionError, TimeoutError)):
        return True
    chain = [error, error.__cause__, error.__context__]
    text = " ".join(f"{type(e).__name__} {e}".lower() for e in chain if e is not None)
    return any(name in text for name in _TRANSIENT_NAMES) or isinstance(error, OSError)


def with_retries(call: Callable[[], T], url: str, policy: RetryPolicy, what: str = "read") -> T:
    """Return ``call()``, retrying transient errors under ``policy``.

    Raises:
        RemoteReadError: Still failing after ``policy.attempts`` tries.
        FileNotFoundError: The object does not exist (404), raised at once.
        PermissionError: Access was denied (401/403), raised at once.
    """
    for attempt in range(policy.attempts):
        try:
            return call()
        except Exception as error:
            if not is_transient(error):
                if isinstance(error, FileNotFoundError) or _status(error) in (404, 410):
                    raise FileNotFoundError(
                        f"{redact(url)!r} does not exist (HTTP 404 or no such key): check the "
                        "URL, or write the shards there first. Not retried."
                    ) from error
                if isinstance(error, PermissionError) or _status(error) in (401, 403):
                    raise PermissionError(
                        f"access to {redact(url)!r} was denied (HTTP 401/403): check the "
                        "credentials the backend finds (environment, config file, "
                        "storage_options) and the bucket policy. Not retried."
                    ) from error
                raise
            if attempt + 1 == policy.attempts:
                last = str(error).replace(url, redact(url))  # no user info or signature
                raise RemoteReadError(
                    f"could not {what} {redact(url)!r} after {policy.attempts} attempts; the "
                    f"last error was {type(error).__name__}: {last}. Check that the server is "
                    "reachable, or allow more retries (RetryPolicy(attempts=...))."
                ) from error
            time.sleep(policy.delay(attempt))
    raise AssertionError("unreachable")  # pragma: no cover
