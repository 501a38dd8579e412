"""A LitData ``TokensLoader`` chunk: its token stream cut into blocks of ``block_size``.

``litdata.optimize(..., item_loader=TokensLoader())`` writes each sample (a 1-D token array
or tensor) as the single ``no_header_numpy:K`` or ``no_header_tensor:K`` leaf of a classic
chunk; the chunk's items are back to back, so after the header the chunk is one token stream
of ``dim`` tokens (``index.json``). ``TokensLoader(block_size=B)`` reads item ``i`` of a
chunk as tokens ``[i * B, (i + 1) * B)`` of that stream; the last ``dim % B`` are unused.

Example:
    >>> layout = TokenLayout.of("no_header_numpy:5")
    >>> layout.numpy_dtype, layout.rows(np.array([[1, 2]], np.uint16)).tolist()
    (dtype('uint16'), [[1, 2]])
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from numpy.typing import NDArray

from lightning_resumable_data.formats._litdata_leaves import (
    NUMPY_DTYPES,
    TORCH_DTYPES,
    serializer_key,
)

__all__ = ["TokenLayout"]


@dataclass(frozen=True, slots=True)
class TokenLayout:
    """How the tokens of a ``TokensLoader`` chunk are stored and returned.

    Attributes:
        tensor: Items are torch tensors (``no_header_tensor``), else NumPy arrays.
        itemsize: Bytes per token.
        numpy_dtype: The tokens' NumPy dtype (``None`` for ``bfloat16``, which has none).
        torch_dtype: The tokens' torch dtype when ``tensor``.
    """

    tensor: bool
    itemsize: int
    numpy_dtype: np.dtype[Any] | None
    torch_dtype: torch.dtype | None

    @classmethod
    def of(cls, name: str) -> TokenLayout:
        """The layout of the ``data_format`` leaf ``name``."""
        number = int(name.split(":", 1)[1])
        if serializer_key(name) == "no_header_numpy":
            dtype = NUMPY_DTYPES[number]
            return cls(False, dtype.itemsize, dtype, None)
        kind = TORCH_DTYPES[number]
        numpy = None if kind == torch.bfloat16 else torch.empty(0, dtype=kind).numpy().dtype
        return cls(True, kind.itemsize, numpy, kind)

    def blocks(self, data: bytes, start: int, end: int, dim: int, block_size: int) -> NDArray[Any]:
        """The chunk's blocks as a ``(dim // block_size, block_size)`` view of raw words.

        Raises:
            ValueError: The chunk's items do not hold ``dim`` tokens.
        """
        if end - start != dim * self.itemsize:
            raise ValueError(
                f"its items hold {end - start} bytes of tokens, index.json says dim={dim} "
                f"tokens of {self.itemsize} bytes"
            )
        count = dim // block_size
        words = np.frombuffer(
            data, dtype=f"<u{self.itemsize}", count=count * block_size, offset=start
        )
        return words.reshape(count, block_size)

    def rows(self, words: NDArray[Any]) -> Any:
        """Raw token words as LitData returns them (a NumPy array or a tensor, a copy)."""
        if not self.tensor:
            assert self.numpy_dtype is not None  # every no_header_numpy dtype has one
            return np.array(words).view(self.numpy_dtype)
        assert self.torch_dtype is not None
        return torch.from_numpy(np.array(words)).view(self.torch_dtype)
