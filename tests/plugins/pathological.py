"""Deliberately pathological plugin trackers, each with one planted performance problem.

Use as ``--tracker tests.plugins.pathological:host_sync`` (and so on). All of them are real trackers
of a crude kind (nearest-feature matching on a stride-4 feature map), so their tracks are valid
[N, T, 2] arrays; what is wrong with each is how it spends its time:

| factory            | planted problem                                                     |
| host_sync          | a ``.cpu()`` / ``.item()`` host sync per point inside a Python loop |
| tf32_off           | matmul-heavy fp32 stage: wants TF32 on a TF32 card (run with fp32)  |
| tiny_kernels       | a Python loop launching thousands of tiny ops (launch-bound)        |
| cold_compile       | first run per shape autotunes candidate chunk sizes (cold >> warm)  |
| cold_compile_torch | the head goes through ``torch.compile`` on its first run            |
| memory_hungry      | on a GPU, holds a scratch buffer filling most of the free memory    |
| quadratic_points   | a stage whose work grows with points squared (all-pairs smoothing)  |

Each is a ``torch.nn.Module`` without declared stages, so its top-level submodules become its stages
(timed by forward hooks), except ``cold_compile`` which declares its stages and times itself.
Sizes scale with the input, so tiny CPU videos stay fast in tests.
"""

from __future__ import annotations

import time

import torch
from torch import nn

FEATURE_STRIDE = 4
FEATURE_CHANNELS = 16
TF32_WIDTH = 256  # hidden width of the matmul-heavy stage
TF32_LAYERS = 6
TINY_ITERATIONS = 12  # refinement iterations per frame in the tiny-op loop
AUTOTUNE_CANDIDATES = (1, 2, 4, 8, 16, 32, 64, 128)  # query chunk sizes tried on the first run
AUTOTUNE_REPEATS = 3
MEMORY_FILL_FRACTION = 0.93  # share of total GPU memory memory_hungry keeps allocated
PAIR_CHANNELS = 32  # feature channels of the all-pairs smoothing


class Features(nn.Module):
    """uint8 frames [T, H, W, 3] -> float features [T, C, h, w] at stride 4."""

    def __init__(self, channels: int = FEATURE_CHANNELS):
        super().__init__()
        gen = torch.Generator().manual_seed(0)
        self.conv = nn.Conv2d(3, channels, 3, padding=1)
        with torch.no_grad():
            self.conv.weight.copy_(torch.randn(self.conv.weight.shape, generator=gen) * 0.2)
            self.conv.bias.zero_()

    def forward(self, frames: torch.Tensor) -> torch.Tensor:
        x = frames.permute(0, 3, 1, 2).float() / 255.0  # [T, 3, H, W]
        x = nn.functional.avg_pool2d(x, FEATURE_STRIDE, ceil_mode=True)
        x = self.conv(x) + x.mean(dim=1, keepdim=True)
        return nn.functional.normalize(x, dim=1)


def query_features(feats: torch.Tensor, queries: torch.Tensor) -> torch.Tensor:
    """Feature vector at each query's cell. feats [T, C, h, w], queries [N, 3] -> [N, C]."""
    t, c, h, w = feats.shape
    qt = queries[:, 0].round().long().clamp(0, t - 1)
    qx = (queries[:, 1] / FEATURE_STRIDE).floor().long().clamp(0, w - 1)
    qy = (queries[:, 2] / FEATURE_STRIDE).floor().long().clamp(0, h - 1)
    return feats[qt, :, qy, qx].to(feats.dtype)  # [N, C]


def cells_to_pixels(index: torch.Tensor, width_cells: int) -> torch.Tensor:
    """Flat cell indices [...] -> pixel centres [..., 2] (x, y)."""
    y = torch.div(index, width_cells, rounding_mode="floor")
    x = index - y * width_cells
    return torch.stack([x, y], dim=-1).float() * FEATURE_STRIDE + (FEATURE_STRIDE - 1) / 2.0


def match(feats: torch.Tensor, qfeat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Best cell per point and frame. feats [T, C, h, w], qfeat [N, C] -> tracks [N, T, 2], visible [N, T]."""
    t, c, h, w = feats.shape
    corr = torch.einsum("nc,tcp->ntp", qfeat, feats.reshape(t, c, h * w).to(qfeat.dtype))  # [N, T, h*w]
    score, index = corr.max(dim=-1)
    return cells_to_pixels(index, w), score > 0.0


class HostSyncMatcher(nn.Module):
    """Matches one point at a time and reads each result back to the host: a sync per point."""

    def forward(self, feats: torch.Tensor, qfeat: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t, c, h, w = feats.shape
        flat = feats.reshape(t, c, h * w)
        tracks, visible = [], []
        for i in range(qfeat.shape[0]):
            corr = torch.einsum("c,tcp->tp", qfeat[i], flat)  # [T, h*w]
            best = corr.argmax(dim=-1).cpu()  # host sync
            if corr.max().item() <= 0.0:  # another host sync
                visible.append(torch.zeros(t, dtype=torch.bool))
            else:
                visible.append(torch.ones(t, dtype=torch.bool))
            tracks.append(cells_to_pixels(best, w))
        return torch.stack(tracks), torch.stack(visible)


class HostSync(nn.Module):
    """Planted problem: a host-device sync per point."""

    def __init__(self):
        super().__init__()
        self.features = Features()
        self.match = HostSyncMatcher()

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        feats = self.features(frames)
        return self.match(feats, query_features(feats, queries))


class Projection(nn.Module):
    """A deep fp32 MLP over every feature cell: matmul-heavy, TF32 would speed it up."""

    def __init__(self, width: int = TF32_WIDTH, layers: int = TF32_LAYERS):
        super().__init__()
        gen = torch.Generator().manual_seed(1)
        self.inp = nn.Linear(FEATURE_CHANNELS, width)
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(layers))
        with torch.no_grad():
            for lin in [self.inp, *self.layers]:
                lin.weight.copy_(torch.randn(lin.weight.shape, generator=gen) / lin.in_features**0.5)

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        t, c, h, w = feats.shape
        x = feats.permute(0, 2, 3, 1).reshape(-1, c)  # [T*h*w, C]
        x = self.inp(x)
        for lin in self.layers:
            x = torch.relu(lin(x)) + x
        x = nn.functional.normalize(x, dim=-1)
        return x.reshape(t, h, w, -1).permute(0, 3, 1, 2)  # [T, width, h, w]


class Matcher(nn.Module):
    def forward(self, feats: torch.Tensor, queries: torch.Tensor):
        return match(feats, query_features(feats, queries))


class Tf32Off(nn.Module):
    """Planted problem: matmul-heavy fp32 work that TF32 would speed up on CC >= 8.0."""

    def __init__(self):
        super().__init__()
        self.features = Features()
        self.projection = Projection()
        self.match = Matcher()

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        return self.match(self.projection(self.features(frames)), queries)


class TinyOpRefiner(nn.Module):
    """Refines every track frame by frame with a Python loop of tiny elementwise ops."""

    def forward(self, feats: torch.Tensor, tracks: torch.Tensor) -> torch.Tensor:
        t = feats.shape[0]
        step = torch.tensor([0.5, 0.5], device=tracks.device)
        refined = []
        for f in range(t):
            pos = tracks[:, f]  # [N, 2]
            velocity = torch.zeros_like(pos)
            for _ in range(TINY_ITERATIONS):  # ~8 tiny kernels per iteration
                delta = (tracks[:, f] - pos) * step
                velocity = velocity * 0.9 + delta
                pos = pos + velocity * 0.1
                pos = torch.clamp(pos, min=0.0)
            refined.append(pos)
        return torch.stack(refined, dim=1)


class TinyKernels(nn.Module):
    """Planted problem: launch-bound refinement of thousands of tiny kernels."""

    def __init__(self):
        super().__init__()
        self.features = Features()
        self.match = Matcher()
        self.refine = TinyOpRefiner()

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        feats = self.features(frames)
        tracks, visible = self.match(feats, queries)
        return self.refine(feats, tracks), visible


class ColdCompile(nn.Module):
    """Planted problem: the first run per shape autotunes the chunk size of its matcher.

    Declares its stages and times itself with the ``timer`` the adapter sets.
    """

    stages = ("features", "autotune", "match")

    def __init__(self):
        super().__init__()
        self.features = Features()
        self.timer = None
        self._best_chunk: dict[tuple, int] = {}

    def _chunked(self, feats: torch.Tensor, qfeat: torch.Tensor, chunk: int):
        parts = [match(feats, qfeat[i:i + chunk]) for i in range(0, qfeat.shape[0], chunk)]
        return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])

    def _autotune(self, feats: torch.Tensor, qfeat: torch.Tensor) -> int:
        key = (tuple(feats.shape), qfeat.shape[0], str(feats.device), feats.dtype)
        if key not in self._best_chunk:
            timings = {}
            for chunk in AUTOTUNE_CANDIDATES:
                t0 = time.perf_counter()
                for _ in range(AUTOTUNE_REPEATS):
                    out = self._chunked(feats, qfeat, chunk)
                    _ = out[0].sum().item()  # wait for the device, as an autotuner does
                timings[chunk] = time.perf_counter() - t0
            self._best_chunk[key] = min(timings, key=timings.get)
        return self._best_chunk[key]

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        timer = self.timer
        timer.begin("features")
        feats = self.features(frames)
        qfeat = query_features(feats, queries)
        timer.end("features")
        timer.begin("autotune")
        chunk = self._autotune(feats, qfeat)
        timer.end("autotune")
        timer.begin("match")
        out = self._chunked(feats, qfeat, chunk)
        timer.end("match")
        return out


class CompiledHead(nn.Module):
    """The matcher's scoring head, run through torch.compile (compiles on the first call)."""

    def __init__(self):
        super().__init__()
        self._compiled = torch.compile(self._score, dynamic=False)

    @staticmethod
    def _score(corr: torch.Tensor) -> torch.Tensor:
        return torch.softmax(corr * 10.0, dim=-1) * corr

    def forward(self, feats: torch.Tensor, qfeat: torch.Tensor):
        t, c, h, w = feats.shape
        corr = torch.einsum("nc,tcp->ntp", qfeat, feats.reshape(t, c, h * w))
        score, index = self._compiled(corr).max(dim=-1)
        return cells_to_pixels(index, w), score > 0.0


class ColdCompileTorch(nn.Module):
    """Planted problem (GPU runs): torch.compile on the first run."""

    def __init__(self):
        super().__init__()
        self.features = Features()
        self.head = CompiledHead()

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        feats = self.features(frames)
        return self.head(feats, query_features(feats, queries))


class ScratchBuffer(nn.Module):
    """Keeps a buffer holding most of the GPU's memory (a cache sized to 'whatever fits')."""

    def __init__(self):
        super().__init__()
        self.scratch: torch.Tensor | None = None

    def forward(self, feats: torch.Tensor) -> torch.Tensor:
        if feats.device.type == "cuda" and self.scratch is None:
            free, total = torch.cuda.mem_get_info(feats.device)
            used = total - free
            want = int(total * MEMORY_FILL_FRACTION) - used
            if want > 0:
                self.scratch = torch.empty(want // 4, dtype=torch.float32, device=feats.device)
        return feats


class MemoryHungry(nn.Module):
    """Planted problem: memory near capacity on a GPU (a no-op on the CPU)."""

    def __init__(self):
        super().__init__()
        self.features = Features()
        self.cache = ScratchBuffer()
        self.match = Matcher()

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        return self.match(self.cache(self.features(frames)), queries)


class PairSmoothing(nn.Module):
    """Smooths each track with every other point's track, per frame: [T, N, N] work and memory."""

    def __init__(self):
        super().__init__()
        gen = torch.Generator().manual_seed(2)
        self.register_buffer("embed", torch.randn(2, PAIR_CHANNELS, generator=gen))

    def forward(self, tracks: torch.Tensor) -> torch.Tensor:
        per_frame = tracks.transpose(0, 1).contiguous()  # [T, N, 2]
        emb = per_frame @ self.embed  # [T, N, P]
        dist = torch.cdist(emb, emb)  # [T, N, N]
        weights = torch.softmax(-dist / (dist.mean() + 1e-6), dim=-1)  # [T, N, N]
        pair = weights @ emb  # [T, N, P]
        correction = (pair - emb).mean(dim=-1, keepdim=True)  # [T, N, 1]
        return tracks + 0.0 * correction.transpose(0, 1)


class QuadraticPoints(nn.Module):
    """Planted problem: a stage quadratic in the number of points per batch."""

    def __init__(self):
        super().__init__()
        self.features = Features()
        self.match = Matcher()
        self.smooth = PairSmoothing()

    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        tracks, visible = self.match(self.features(frames), queries)
        return self.smooth(tracks), visible


# the ``module:factory`` names (recorded reports and scripts use them); a class is a factory of its module
host_sync = HostSync
tf32_off = Tf32Off
tiny_kernels = TinyKernels
cold_compile = ColdCompile
cold_compile_torch = ColdCompileTorch
memory_hungry = MemoryHungry
quadratic_points = QuadraticPoints


def broken_factory() -> nn.Module:
    """A plugin whose factory raises (for the error-path tests)."""
    raise RuntimeError("weights file missing")


class _RaisesInForward(nn.Module):
    def forward(self, frames: torch.Tensor, queries: torch.Tensor):
        raise ValueError("plugin exploded")


def raises_in_track() -> nn.Module:
    """A plugin that raises while tracking (for the error-path tests)."""
    return _RaisesInForward()
