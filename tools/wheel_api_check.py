"""The Python API of an installed blocklab wheel, as tools/test-wheels.sh runs it in each root: a small run
trains (its loss falls) and the text run TEXT_RUN (made by the CLI just before) samples.

    python wheel_api_check.py TEXT_RUN
"""
import sys

import blocklab

run = blocklab.train(layers=2, width=16, heads=2, vocab=8, copy_len=4, batch=8, steps=60, lr=3e-3, threads=2,
                     out="py-run", progress=False)
loss = run.metrics["loss"]
print("   python: loss", round(float(loss[:5].mean()), 3), "->", round(float(loss[-5:].mean()), 3))
assert loss[-5:].mean() < loss[:5].mean()
print("   python sample:", repr(blocklab.sample(sys.argv[1], "Ruth", tokens=30, seed=2)))
