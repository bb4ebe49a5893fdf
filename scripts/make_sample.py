"""Regenerate the bundled sample: resources/sample.mp4, sample.queries.csv, sample.gt.npz.

Fixed seed; held-out ('val') textures, with photos when scikit-image is installed.
Run from the repository root: ``python scripts/make_sample.py [--out resources]``.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine.training.synthetic import SynthConfig, TextureBank, generate_video  # noqa: E402
from engine.training.synthetic.evalset import write_video_and_truth  # noqa: E402

VIDEO_SEED = 44  # picked by eye: photo background, sprites crossing, some leaving the frame
BANK_SEED = 47
SAMPLE_CONFIG = SynthConfig(num_frames=47, height=256, width=256, num_points=80, num_sprites=(3, 5),
                            blur_prob=0.0, noise_std=(0.005, 0.01))


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "resources", help="folder for sample.* (default: resources)")
    out = p.parse_args().out
    out.mkdir(parents=True, exist_ok=True)
    bank = TextureBank.build("cpu", size=512, photos=True, procedural=16, seed=BANK_SEED, split="val")
    data = generate_video(VIDEO_SEED, SAMPLE_CONFIG, bank)
    write_video_and_truth(out, "sample", data)
    qt = data["query_t"]
    print(f"sample: {data['video'].shape} video, {len(qt)} queries ({int((qt > 0).sum())} after frame 0), "
          f"visible {data['visible'].mean():.2f}")
    for name in ("sample.mp4", "sample.queries.csv", "sample.gt.npz"):
        print(f"  {out / name}: {(out / name).stat().st_size / 1024:.0f} KiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
