"""Values that depend only on an element's position in the whole tensor and a key,
never on how the tensor is split: dropout's mask, and the runtime's parameter
initialisation and synthetic data, so blocks computed apart assemble to exactly the
whole (a counter-based hash, as in Philox, rather than a stateful generator)."""

from __future__ import annotations

import zlib

import torch

from flextui.graph.region import Region

_MASK32 = 0xFFFFFFFF


def key_of(*parts: object) -> int:
    """A 32-bit key from names and numbers (the same in every process)."""
    return zlib.crc32(":".join(map(str, parts)).encode())


def block_hash(region: Region, shape: tuple[int, ...], key: int,
               device: torch.device | str = "cpu") -> torch.Tensor:
    """A 32-bit hash (in an int64 tensor of the block's shape) of each element's
    row-major index in the whole tensor of ``shape``, mixed with ``key``."""
    return _hash32(_global_index(region, shape, torch.device(device)), key)


def block_uniform(region: Region, shape: tuple[int, ...], key: int, dtype: torch.dtype,
                  device: torch.device | str = "cpu") -> torch.Tensor:
    """Values in [0, 1) from ``block_hash``, in ``dtype``."""
    return (block_hash(region, shape, key, device).to(torch.float64) / 2**32).to(dtype)


def _global_index(region: Region, shape: tuple[int, ...], device: torch.device) -> torch.Tensor:
    """The row-major index in the whole tensor of ``shape`` of every element of the block."""
    index = torch.zeros((), dtype=torch.int64, device=device)
    for dim, ((start, stop), size) in enumerate(zip(region, shape)):
        view = [1] * len(shape)
        view[dim] = stop - start
        index = index * size + torch.arange(start, stop, device=device).view(view)
    return index


def _hash32(index: torch.Tensor, key: int) -> torch.Tensor:
    """A 32-bit integer hash (T. Mueller's 0x45d9f3b mixer) of every index, mixed with
    ``key``; products stay below 2**59, so int64 arithmetic never overflows."""
    x = (index ^ (index >> 32) ^ key) & _MASK32
    for _ in range(2):
        x = (((x >> 16) ^ x) * 0x45D9F3B) & _MASK32
    return (x >> 16) ^ x
