import os
import subprocess

import numpy as np
import pytest

import blocklab

# A model small enough for many tests a second: 2 blocks x width 16, copy task V=8 n=4 (T = 7).
TINY = dict(layers=2, width=16, heads=2, vocab=8, copy_len=4, batch=4, threads=1)


@pytest.fixture
def tiny():
    return dict(TINY)


def cli(*args, check=True):
    """Runs the blocklab CLI that ships in the package (the same core as the module)."""
    return subprocess.run([blocklab._cli_path(), *map(str, args)], capture_output=True, text=True, check=check,
                          env=dict(os.environ))


def cli_flags(config):
    flags = []
    for key, value in config.items():
        flags += ["--" + key.replace("_", "-"), blocklab._text(key, value)]
    return flags


def copy_batch(vocab, copy_len, batch, seed=0):
    """A copy-task batch: inputs (B, 2n-1), targets shifted by one, the loss on the copied half."""
    rng = np.random.default_rng(seed)
    first = rng.integers(0, vocab, size=(batch, copy_len))
    seq = np.concatenate([first, first], axis=1)
    inputs, targets = seq[:, :-1], seq[:, 1:]
    mask = np.zeros_like(inputs)
    mask[:, copy_len - 1:] = 1
    return inputs.astype(np.int32), targets.astype(np.int32), mask
