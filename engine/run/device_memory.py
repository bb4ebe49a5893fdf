"""Device memory a CorrTrack run needs, estimated from the run's shape before it starts.

The estimate adds up the network's big tensors (shapes from engine/trackers/corrtrack/model.py):

    e  = bytes per element of the compute dtype: 4 for fp32/tf32 (and int8/fp8, whose float ops stay
         in float), 2 for fp16/bf16
    T  = frames, N = points per batch (at most the query count), F = frames per batch (backbone chunk),
    H x W the decoded frame size

    kept for the whole run
      weights    P x 4  (+ P x e: autocast's cast copies)                    P = parameter count
      features   T x 64 x 64 x C x e                                         (C = feature_dim = 64)
      grey       T x 256 x 256 x 4                                           (NCC polish on)
      fine grey  T x h x w                  (the polish's fine stage: uint8 frames at the video's size capped
                                             at 1280 px, for videos of 384 px or more; FineConfig.size_for)
    the larger of
      backbone   F x (H x W x 3 + 2 x H x W x 3 x 4 + BACKBONE_BYTES_PER_FRAME[e])
                 (the chunk's uint8 upload: frames go up one backbone chunk at a time; two float32 copies of
                 each frame at its own size before the resize to 256, then the network's activations and
                 convolution workspaces at 256 x 256)
      batch      N x T x (PYRAMID_CELLS x e + TRACK_WORK_BYTES_PER_POINT_FRAME)
                 PYRAMID_CELLS = 64^2 + 32^2 + 16^2: the correlation pyramid [N, T, s, s]; the rest is
                 init_head's softmax over 32^2 cells and refine's windows, hidden state and MLP;
                 with the fine stage, plus FINE_REGION_COPIES x 4 x Tc x N x S^2: its search over chunks of
                 Tc frames (polish.fine_chunk_frames) with regions of S x S px (it runs after the refine
                 graph, whose pool stays reserved, so it adds to the batch rather than reusing it)
    plus
      workspace  WORKSPACE_BYTES[e] (cuBLAS/cuDNN workspaces, CUDA graph pools)

On the CPU the same tensors live in host memory (``engine.run.memory`` adds them to the host check),
with the GPU-only workspace left out, the frames shared with the decoded array (no upload copy) and the
working sets measured there (process peak RSS over a run, scripts/cpu_memory.py, 11 shapes up to
96 x 1080p and 192 x 640x360, twice):

    cpu        P x 4 + features + grey + fine grey
               + the larger of
                   backbone   T x H x W x CPU_VIDEO_BYTES_PER_PIXEL
                              + F x (H x W x CPU_CHUNK_BYTES_PER_PIXEL + CPU_CHUNK_BYTES_PER_FRAME)
                   batch      CPU_BATCH_SLACK x the batch term above (malloc does not hand all of a
                              freed batch back to the next)

never below the measured peak there, median 1.17x and at most 1.76x above it (small frames, where
the fixed per-frame part dominates).

The batch term dominates long runs: 1024 points x 1500 frames in fp32 is about 50 GiB. The batch term's
tensors are checked against live tensor bytes measured on the CPU (tests/test_device_memory.py); the
backbone and workspace constants are fitted to the allocator's peak on an H200 over 144 run shapes
(tests/data/h200/device_memory.json, scripts/device_memory.py; measured again in session 24 with the chunked
upload and the fine stage): the estimate is never below the measured peak there (1.02x at least, median 1.28x),
at most 1.31x above it for runs over 4 GiB. When the run is on a CUDA device,
``check_device_memory`` compares the estimate with ``torch.cuda.mem_get_info`` and refuses with the points
per batch or the frame count that would fit.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from engine.core.errors import UserError
from engine.trackers.corrtrack.polish import FINE_CHUNK_ELEMENTS, FineConfig, fine_chunk_frames

#: correlation cells per point and frame over the three pyramid levels (strides 4, 8, 16 of 256 px)
PYRAMID_CELLS = 64 * 64 + 32 * 32 + 16 * 16
#: other float32 bytes per point and frame while tracking: init_head's max/logsumexp/softmax over the
#: 32x32 level (3 x 1024 x 4), refine's 3 x 49 window cells, hidden [.., 128] with its LayerNorm and
#: 2x MLP, positions and logits (measured on the CPU: tests/test_device_memory.py)
TRACK_WORK_BYTES_PER_POINT_FRAME = 3 * 1024 * 4 + 3 * 49 * 4 + 6 * 128 * 4
#: float32 copies of a frame at its decoded size that the backbone's input step holds (uint8 -> float, /255)
SOURCE_FLOAT_COPIES = 2
#: device bytes per frame of the backbone at 256 x 256 by element size (fitted on the H200: fp32's
#: convolutions take larger workspaces than the activations alone, about 7 MB a frame on the CPU)
BACKBONE_BYTES_PER_FRAME = {4: 20 * 2**20, 2: 4 * 2**20}
#: fixed device bytes by element size: cuBLAS/cuDNN workspaces and CUDA graph pools (fitted on the H200)
WORKSPACE_BYTES = {4: 384 * 2**20, 2: 256 * 2**20}
#: CPU working memory (fitted to the peak RSS of CPU runs, scripts/cpu_memory.py): bytes per pixel of every
#: frame while the backbone runs, per pixel and per frame of one backbone chunk, and the batch's slack
CPU_VIDEO_BYTES_PER_PIXEL = 4
CPU_CHUNK_BYTES_PER_PIXEL = 18
CPU_CHUNK_BYTES_PER_FRAME = 7 * 2**20
CPU_BATCH_SLACK = 1.2
FEATURE_CELLS = 64 * 64
GREY_BYTES_PER_FRAME = 256 * 256 * 4
#: bytes per element of the compute dtype per precision mode
ELEMENT_BYTES = {"fp32": 4, "tf32": 4, "fp16": 2, "bf16": 2, "int8": 4, "fp8": 4}
#: share of the free device memory a run may plan to use (allocator rounding, CUDA context, graph pools)
DEVICE_HEADROOM = 0.8
#: CorrTrack's defaults when the tracker object is not at hand
DEFAULT_FEATURE_DIM = 64
DEFAULT_PARAMETERS = 1_000_000
CORRTRACK_NAMES = ("corrtrack", "corrtrack-nopolish")
#: the fine stage as a tracker made with its defaults runs it
DEFAULT_FINE = FineConfig()
#: region-sized float32 tensors alive at once in the fine stage's search (live tensor bytes on the CPU: 4.20-4.31
#: over four shapes from 600x400 to 1280x720, tests/test_device_memory.py)
FINE_REGION_COPIES = 4.5


@dataclass(frozen=True)
class DeviceEstimate:
    """Device bytes one CorrTrack run needs, by part."""

    kept_bytes: int  # weights, features, grey frames (for the whole run) and the fixed workspace
    backbone_bytes: int  # one chunk of frames through the backbone
    batch_bytes: int  # one batch of points through the cost volume and refinement
    per_point_bytes: int  # batch bytes per point (for "how many points per batch fit")
    num_frames: int
    fine_bound_bytes: int = 0  # the fine stage's search at this or any smaller batch is at most this

    @property
    def total_bytes(self) -> int:
        """Peak: what is kept plus the larger of the two working sets."""
        return self.kept_bytes + max(self.backbone_bytes, self.batch_bytes)


def estimate_corrtrack_device_bytes(num_frames: int, width: int, height: int, num_queries: int,
                                    points_per_batch: int, frames_per_batch: int, precision: str = "fp32",
                                    parameters: int = DEFAULT_PARAMETERS, feature_dim: int = DEFAULT_FEATURE_DIM,
                                    polish: bool = True, fine: FineConfig | None = DEFAULT_FINE
                                    ) -> DeviceEstimate:
    """The formula of the module docstring."""
    e = ELEMENT_BYTES.get(precision, 4)
    t = max(0, int(num_frames))
    n = max(0, min(int(points_per_batch), int(num_queries)))
    weights = parameters * 4 + (parameters * e if e < 4 else 0)
    pixels = int(width) * int(height)
    kept = (weights + t * FEATURE_CELLS * feature_dim * e
            + (t * GREY_BYTES_PER_FRAME if polish else 0) + WORKSPACE_BYTES[4 if e >= 4 else 2])
    per_point = t * (PYRAMID_CELLS * e + TRACK_WORK_BYTES_PER_POINT_FRAME)
    chunk = min(max(1, int(frames_per_batch)), max(t, 1))
    backbone = chunk * (pixels * 3 + SOURCE_FLOAT_COPIES * pixels * 3 * 4
                        + BACKBONE_BYTES_PER_FRAME[4 if e >= 4 else 2])
    fine_kept, fine_work, fine_bound = fine_stage_bytes(t, int(width), int(height), n, fine if polish else None)
    return DeviceEstimate(kept + fine_kept, backbone, n * per_point + fine_work, per_point, t, fine_bound)


def fine_stage_bytes(num_frames: int, width: int, height: int, points: int, fine: FineConfig | None
                     ) -> tuple[int, int, int]:
    """(bytes kept for the run, bytes of its search for a batch of ``points``, a bound on the search for this or
    any smaller batch) of the polish's fine stage; zeros where it does not run (off, or a video below its minimum
    size). The bound: a chunk holds at most max(FINE_CHUNK_ELEMENTS, points x S^2) region floats (one frame at
    least)."""
    size = fine.size_for(width, height) if fine is not None and num_frames > 0 and points > 0 else None
    if fine is None or size is None:
        return 0, 0, 0
    fw, fh = size
    cfg = fine.ncc_for(fw, fh)
    cells = (2 * cfg.half + 1 + 2 * cfg.radius) ** 2
    frames = min(num_frames, fine_chunk_frames(points, cfg))
    per_float = FINE_REGION_COPIES * 4
    return (num_frames * fw * fh, int(per_float * frames * points * cells),
            int(per_float * max(FINE_CHUNK_ELEMENTS, points * cells)))


def estimate_corrtrack_cpu_bytes(num_frames: int, width: int, height: int, num_queries: int,
                                 points_per_batch: int, frames_per_batch: int, precision: str = "fp32",
                                 parameters: int = DEFAULT_PARAMETERS, feature_dim: int = DEFAULT_FEATURE_DIM,
                                 polish: bool = True, fine: FineConfig | None = DEFAULT_FINE) -> int:
    """Host bytes CorrTrack's tensors take over a run on the CPU (the 'cpu' formula of the module docstring)."""
    e = ELEMENT_BYTES.get(precision, 4)
    t = max(0, int(num_frames))
    pixels = int(width) * int(height)
    kept = (parameters * 4 + t * FEATURE_CELLS * feature_dim * e + (t * GREY_BYTES_PER_FRAME if polish else 0)
            + fine_stage_bytes(t, int(width), int(height), 1, fine if polish else None)[0])
    chunk = min(max(1, int(frames_per_batch)), max(t, 1))
    backbone = t * pixels * CPU_VIDEO_BYTES_PER_PIXEL + chunk * (pixels * CPU_CHUNK_BYTES_PER_PIXEL
                                                                  + CPU_CHUNK_BYTES_PER_FRAME)
    device = estimate_corrtrack_device_bytes(num_frames, width, height, num_queries, points_per_batch,
                                             frames_per_batch, precision, parameters, feature_dim, polish, fine)
    return kept + max(backbone, int(CPU_BATCH_SLACK * device.batch_bytes))


def _corrtrack_shape(tracker: Any) -> tuple[int, int, bool, FineConfig | None] | None:
    """(parameters, feature dim, polish, fine stage) of a CorrTrack given by name or object; None for another
    tracker."""
    name = tracker if isinstance(tracker, str) else getattr(tracker, "name", "")
    if str(name) not in CORRTRACK_NAMES:
        return None
    parameters, feature_dim, polish = DEFAULT_PARAMETERS, DEFAULT_FEATURE_DIM, str(name) == "corrtrack"
    model = getattr(tracker, "model", None)
    if model is not None and hasattr(model, "parameters"):
        parameters = sum(int(p.numel()) for p in model.parameters())
        feature_dim = int(getattr(getattr(model, "cfg", None), "feature_dim", feature_dim))
    fine = getattr(tracker, "fine_config", DEFAULT_FINE)
    return parameters, feature_dim, bool(getattr(tracker, "polish", polish)), fine


def estimate_for_tracker(tracker: Any, num_frames: int, width: int, height: int, num_queries: int,
                         points_per_batch: int, frames_per_batch: int, precision: str) -> DeviceEstimate | None:
    """The estimate for a tracker given by name or object; None for a tracker the formula does not model."""
    shape = _corrtrack_shape(tracker)
    if shape is None:
        return None
    return estimate_corrtrack_device_bytes(num_frames, width, height, num_queries, points_per_batch,
                                           frames_per_batch, precision, *shape)


def cpu_bytes_for_tracker(tracker: Any, num_frames: int, width: int, height: int, num_queries: int,
                          points_per_batch: int, frames_per_batch: int, precision: str) -> int | None:
    """Host bytes of the tracker's tensors in a CPU run; None for a tracker the formula does not model."""
    shape = _corrtrack_shape(tracker)
    if shape is None:
        return None
    return estimate_corrtrack_cpu_bytes(num_frames, width, height, num_queries, points_per_batch,
                                        frames_per_batch, precision, *shape)


def free_device_bytes(device: Any) -> int | None:
    """Free memory on a CUDA device, or None off CUDA or when it cannot say: what the driver reports free
    (torch.cuda.mem_get_info) plus what torch's caching allocator holds reserved but unused (it reuses that first)."""
    try:
        import torch

        dev = torch.device(device)
        if dev.type != "cuda" or not torch.cuda.is_available():
            return None
        free, _total = torch.cuda.mem_get_info(dev)
        cached = torch.cuda.memory_reserved(dev) - torch.cuda.memory_allocated(dev)
        return int(free) + max(0, int(cached))
    except Exception:  # no driver, a lost device: the run itself will say
        return None


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def check_device_memory(estimate: DeviceEstimate | None, what: str, free: int | None,
                        points_per_batch: int) -> None:
    """UserError when the run cannot fit in ``free`` device bytes, suggesting points per batch or frames that fit."""
    if estimate is None or free is None:
        return
    budget = int(free * DEVICE_HEADROOM)
    if estimate.total_bytes <= budget:
        return
    room = budget - estimate.kept_bytes - estimate.fine_bound_bytes
    fit_points = int(room // estimate.per_point_bytes) if estimate.per_point_bytes > 0 and room > 0 else 0
    if fit_points >= 1:
        fit = min(fit_points, points_per_batch)
        hint = f"use --points-per-batch {fit} or lower, or track fewer frames"
    else:
        per_frame = (estimate.total_bytes / max(1, estimate.num_frames))
        frames = max(1, int(budget // per_frame)) if per_frame > 0 else 1
        hint = f"track at most about {frames} frames (--max-frames {frames}) with fewer points per batch"
    raise UserError(
        f"{what}: the run needs about {_gib(estimate.total_bytes)} of device memory (kept {_gib(estimate.kept_bytes)}, "
        f"largest batch {_gib(max(estimate.batch_bytes, estimate.backbone_bytes))}), "
        f"only {_gib(free)} is free", hint)


def check_run_device_memory(tracker: Any, device: Any, what: str, *, num_frames: int, width: int, height: int,
                            num_queries: int, points_per_batch: int, frames_per_batch: int,
                            precision: str) -> DeviceEstimate | None:
    """Before a run: refuse (UserError) when the tracker's estimate exceeds the free memory of a CUDA ``device``."""
    estimate = estimate_for_tracker(tracker, num_frames, width, height, num_queries, points_per_batch,
                                    frames_per_batch, precision)
    check_device_memory(estimate, what, free_device_bytes(device), points_per_batch)
    return estimate
