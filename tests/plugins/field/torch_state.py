"""The process-wide torch settings a plugin can change, saved before it runs and put back after."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class TorchState:
    """Intra-op and inter-op threads, the TF32 flags, cuDNN's benchmark/deterministic/enabled flags and
    dynamo's recompile limit."""

    num_threads: int
    matmul_allow_tf32: bool
    cudnn_allow_tf32: bool
    cudnn_benchmark: bool
    cudnn_deterministic: bool
    cudnn_enabled: bool
    recompile_limit: int | None

    @classmethod
    def save(cls) -> TorchState:
        return cls(torch.get_num_threads(), torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
                   torch.backends.cudnn.benchmark, torch.backends.cudnn.deterministic, torch.backends.cudnn.enabled,
                   _recompile_limit())

    def restore(self) -> None:
        if torch.get_num_threads() != self.num_threads:
            torch.set_num_threads(self.num_threads)
        torch.backends.cuda.matmul.allow_tf32 = self.matmul_allow_tf32
        torch.backends.cudnn.allow_tf32 = self.cudnn_allow_tf32
        torch.backends.cudnn.benchmark = self.cudnn_benchmark
        torch.backends.cudnn.deterministic = self.cudnn_deterministic
        torch.backends.cudnn.enabled = self.cudnn_enabled
        if self.recompile_limit is not None:
            from torch import _dynamo

            _dynamo.config.recompile_limit = self.recompile_limit

    def changes(self, other: TorchState) -> dict[str, tuple[object, object]]:
        """The settings that differ from ``other``: name -> (this, other)."""
        return {k: (v, getattr(other, k)) for k, v in self.__dict__.items() if getattr(other, k) != v}


def _recompile_limit() -> int | None:
    try:
        from torch import _dynamo

        return int(_dynamo.config.recompile_limit)
    except (ImportError, AttributeError):
        return None
