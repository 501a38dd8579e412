"""Token shards at a URL: the hook through which the storage layer above serves them.

The shard layer reads local files only. ``TokenShardReader("s3://...")`` and
``open_token_shards("s3://...")`` ask the provider registered here, which the storage layer
(``lightning_resumable_data.remote.tokens``) registers when it is loaded. If none is
registered yet, the provider's module is loaded by its name, as fsspec loads its known
implementations, so the shard layer never names the layer above in an import.

Example:
    >>> is_url("s3://bucket/shards"), is_url("shards")
    (True, False)
    >>> url_token_shards().reader.__name__
    'RemoteTokenShardReader'
"""

from __future__ import annotations

import importlib
import threading
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeGuard

from numpy.typing import DTypeLike

if TYPE_CHECKING:
    from lightning_resumable_data.shards.token_reader import TokenShardReader

__all__ = ["UrlTokenShards", "is_url", "register_url_token_shards", "url_token_shards"]

PROVIDER: Final = "lightning_resumable_data.remote.tokens"
"""The module that registers the provider of token shards at a URL when it is loaded."""
_INSTALL: Final = "pip install 'lightning-resumable-data[remote]'"

_lock = threading.Lock()
_provider: UrlTokenShards | None = None


class UrlTokenShards(Protocol):
    """How to open token shards at a URL: the reader class and the directory opener."""

    @property
    def reader(self) -> type[TokenShardReader]:
        """The :class:`TokenShardReader` subclass that ``TokenShardReader(url)`` builds."""
        ...

    def open(
        self,
        url: str,
        *,
        seq_len: int | None,
        dtype: DTypeLike | None,
        pattern: str,
        preload: bool,
        cache: Any,
    ) -> list[TokenShardReader]:
        """One reader per shard of the directory ``url`` (see ``open_token_shards``)."""
        ...


def is_url(path: object) -> TypeGuard[str]:
    """Whether ``path`` is a URL for the shard layer: a ``str`` holding ``://``."""
    return isinstance(path, str) and "://" in path


def register_url_token_shards(provider: UrlTokenShards) -> None:
    """Make ``provider`` open every token shard at a URL (replaces an earlier one)."""
    global _provider
    with _lock:
        _provider = provider


def url_token_shards() -> UrlTokenShards:
    """The registered provider, loading :data:`PROVIDER` first if none is registered.

    Raises:
        ImportError: The provider's module cannot be loaded (the ``[remote]`` extra is
            missing), or it registered nothing.
    """
    provider = _provider
    if provider is None:
        try:
            importlib.import_module(PROVIDER)  # registers itself
        except ImportError as error:
            raise ImportError(
                f"token shards at a URL need the remote storage layer ({PROVIDER}), which "
                f"could not be loaded: {error}. Install it with {_INSTALL}."
            ) from error
        provider = _provider
        if provider is None:
            raise ImportError(
                f"{PROVIDER} registered no opener of token shards at a URL; reinstall with "
                f"{_INSTALL}."
            )
    return provider
