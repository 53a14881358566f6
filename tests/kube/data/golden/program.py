"""Stand-in training program for the nanogpt golden manifest (the real one is hpq.scripts.nanogpt)."""
import os

print("iter 0: loss 4.0 rank", os.environ.get("RANK"))
