"""Live tensor bytes of a block of torch code on the CPU: an allocator measurement without a GPU.

Every tensor an op returns is counted under its storage until the last tensor on that storage is gone
(views share their storage's count); storages that existed before the block (weights, inputs) are not
counted. ``peak`` is the most bytes alive at once: what the caching allocator would have to hold.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


class LiveTensorBytes(TorchDispatchMode):
    """``with LiveTensorBytes(ignore=tensors) as m: ...`` then ``m.peak`` (bytes)."""

    def __init__(self, ignore: tuple[torch.Tensor, ...] = ()):
        super().__init__()
        self.ignore = {t.untyped_storage().data_ptr() for t in ignore}
        self.sizes: dict[int, int] = {}
        self.refs: dict[int, int] = {}
        self.now = 0
        self.peak = 0

    def _drop(self, key: int) -> None:
        self.refs[key] -= 1
        if self.refs[key] == 0:
            del self.refs[key]
            self.now -= self.sizes.pop(key)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in tree_flatten(out)[0]:
            if not isinstance(t, torch.Tensor):
                continue
            key = t.untyped_storage().data_ptr()
            if not key or key in self.ignore:
                continue
            if key not in self.refs:
                self.sizes[key] = t.untyped_storage().nbytes()
                self.refs[key] = 0
                self.now += self.sizes[key]
                self.peak = max(self.peak, self.now)
            self.refs[key] += 1
            weakref.finalize(t, self._drop, key)
        return out
