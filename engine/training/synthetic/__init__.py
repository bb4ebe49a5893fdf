"""Procedural videos with exact ground-truth tracks: the sample, test inputs and training data.

``generate_batch`` renders batches on any torch device (training); ``generate_video`` makes one
video as numpy arrays; ``write_eval_set`` writes an evaluation folder (DESIGN.md layout).
"""

from engine.training.synthetic.check import bilinear_colour, photometric_agreement
from engine.training.synthetic.config import SynthBatch, SynthConfig
from engine.training.synthetic.evalset import generate_video, write_eval_set
from engine.training.synthetic.render import generate_batch
from engine.training.synthetic.textures import TextureBank

__all__ = ["SynthBatch", "SynthConfig", "TextureBank", "bilinear_colour", "generate_batch", "generate_video",
           "photometric_agreement", "write_eval_set"]
