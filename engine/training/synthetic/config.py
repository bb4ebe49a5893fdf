"""Knobs of the synthetic video generator and the batch it returns."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch


@dataclass
class SynthConfig:
    """All the knobs of one synthetic scene; defaults suit training at 256x256."""

    num_frames: int = 24
    height: int = 256
    width: int = 256
    num_points: int = 128
    num_sprites: tuple[int, int] = (2, 6)  # inclusive range of occluding sprites per video
    sprite_size: tuple[float, float] = (0.08, 0.25)  # sprite radius as a share of min(H, W)
    sprite_motion: float = 1.0  # scales sprite travel, spin and growth (0 = still sprites)
    camera_motion: float = 1.0  # scales camera pan, zoom, roll and perspective (0 = still camera)
    camera_zoom: tuple[float, float] = (0.8, 1.6)  # texels per pixel of the background at the start
    wobble: float = 1.0  # scales the smooth sinusoidal jitter on top of the drifts
    photometric: bool = True  # False: no brightness change, noise or blur (exact colours)
    brightness_change: float = 0.15  # largest gain change over the video (0.15 = +-15 %)
    contrast_range: tuple[float, float] = (0.75, 1.15)
    noise_std: tuple[float, float] = (0.0, 0.02)  # per-video Gaussian noise, in [0, 1] units
    blur_prob: float = 0.2  # share of videos with blurred frames
    blur_sigma: tuple[float, float] = (0.4, 1.3)
    query_first_frame_only: bool = False
    query_first_frame_share: float = 0.3  # share of queries on frame 0 when not first-frame-only
    edge_px: float = 0.6  # width of the soft sprite edge, pixels
    texture_poor_share: float = 0.0  # share of backgrounds with a texture-poor surface (sky-like; v2 training)
    texture_poor_sprite_share: float = 0.0  # share of sprites with one
    motion_blur_prob: float = 0.0  # share of videos rendered with motion blur (exposure over sub-frames)
    motion_blur_exposure: tuple[float, float] = (0.4, 1.0)  # exposure as a share of the frame interval
    anchored_sprite_share: float = 0.0  # share of sprites fixed to the background plane (they move with the camera,
    #                                     as a building or a sign against a plain sky: context for its points)

    def __post_init__(self) -> None:
        if self.num_frames < 1 or self.height < 2 or self.width < 2 or self.num_points < 1:
            raise ValueError(f"need num_frames >= 1, height and width >= 2, num_points >= 1; got {self.num_frames} "
                             f"frames, {self.height}x{self.width}, {self.num_points} points")
        lo, hi = self.num_sprites
        if not 0 <= lo <= hi:
            raise ValueError(f"num_sprites must be (lo, hi) with 0 <= lo <= hi, got {self.num_sprites}")
        shares = (self.query_first_frame_share, self.blur_prob, self.texture_poor_share,
                  self.texture_poor_sprite_share, self.motion_blur_prob, self.anchored_sprite_share)
        if not all(0.0 <= share <= 1.0 for share in shares):
            raise ValueError("query_first_frame_share, blur_prob, texture_poor_share, texture_poor_sprite_share, "
                             "motion_blur_prob and anchored_sprite_share must lie in [0, 1]")
        lo_e, hi_e = self.motion_blur_exposure
        if not 0.0 <= lo_e <= hi_e <= 2.0:
            raise ValueError(f"motion_blur_exposure must be (lo, hi) with 0 <= lo <= hi <= 2, got "
                             f"{self.motion_blur_exposure}")


@dataclass
class SynthBatch:
    """A batch of videos with exact ground truth, on the generating device."""

    video: torch.Tensor  # uint8 [B, T, H, W, 3] RGB
    tracks: torch.Tensor  # float32 [B, N, T, 2] (x, y) pixels, (0, 0) = centre of the top-left pixel
    visible: torch.Tensor  # bool [B, N, T]
    queries: torch.Tensor  # float32 [B, N, 3] (t, x, y); visible at its query frame

    def numpy(self, index: int) -> dict[str, np.ndarray]:
        """Video ``index`` as numpy arrays (the layout of ``generate_video``)."""
        queries = self.queries[index].cpu().numpy()
        return {
            "video": self.video[index].cpu().numpy(),
            "tracks": self.tracks[index].cpu().numpy(),
            "visible": self.visible[index].cpu().numpy(),
            "queries": queries,
            "query_t": queries[:, 0].round().astype(np.int64),
        }
