import json

import numpy as np
import pytest

import blocklab
from conftest import TINY, cli


def read_csv(path):
    with open(path) as f:
        header = f.readline().strip().split(",")
        rows = [line.rstrip("\n").split(",") for line in f if line.strip()]
    return header, rows


def test_train_records_curvature_without_changing_the_run(tmp_path):
    config = dict(TINY, steps=4, warmup=2, checkpoint_every=4)
    plain = blocklab.train(config, out=tmp_path / "plain", progress=False)
    probed = blocklab.train(config, out=tmp_path / "probed", progress=False, curvature_every=2, curvature_per_block=False)
    with open(tmp_path / "plain" / "metrics.csv") as a, open(tmp_path / "probed" / "metrics.csv") as b:
        assert a.read() == b.read()
    assert np.array_equal(plain.metrics["loss"], probed.metrics["loss"])
    header, rows = read_csv(tmp_path / "probed" / "curvature.csv")
    assert header[:10] == ["step", "lr", "loss", "sharpness", "preconditioned_sharpness", "edge_gd", "edge_adam", "trace",
                           "converged", "preconditioned_converged"]
    assert [r[0] for r in rows] == ["0", "2", "4"]
    assert rows[0][4] == "" and float(rows[1][4]) > 0  # no Adam state before the first update
    assert rows[0][9] == "" and rows[1][8] in ("0", "1") and rows[1][9] in ("0", "1")


def test_curvature_equals_the_clis_json(tmp_path):
    run = blocklab.train(dict(TINY, steps=3, checkpoint_every=3), out=tmp_path / "run", progress=False)
    ours = blocklab.curvature(run, top=2, trace_samples=4, threads=1)
    theirs = json.loads(cli("curvature", run.out, "--top", "2", "--trace-samples", "4", "--threads", "1", "--json").stdout)
    for key in ("sharpness", "top", "preconditioned_sharpness", "trace", "per_block", "method", "step", "lr", "converged",
                "preconditioned_converged"):
        assert ours[key] == theirs[key], key
    assert ours["sharpness"] == ours["top"][0] >= ours["top"][1]
    assert len(ours["per_block"]) == TINY["layers"]
    assert ours["edge_adam"] == pytest.approx(38 / ours["lr"])
    with pytest.raises(blocklab.Error, match="no checkpoint at step 7"):
        blocklab.curvature(run, checkpoint=7)
    with pytest.raises(blocklab.Error, match="no such run directory"):
        blocklab.curvature(tmp_path / "missing")


def test_curvature_reads_a_token_file(tmp_path):
    run = blocklab.train(dict(TINY, steps=2, checkpoint_every=2), out=tmp_path / "run", progress=False)
    rng = np.random.default_rng(0)
    first = rng.integers(0, TINY["vocab"], size=(3, TINY["copy_len"]))
    np.save(tmp_path / "tokens.npy", np.concatenate([first, first], axis=1).astype(np.int32))
    r = blocklab.curvature(run, tokens=str(tmp_path / "tokens.npy"), per_block=False, trace_samples=0)
    assert r["batch"]["source"] == "file" and r["batch"]["sequences"] == 3
    assert r["sharpness"] > 0
    bad = np.zeros((3, 5), dtype=np.int64)
    np.save(tmp_path / "bad.npy", bad)
    with pytest.raises(blocklab.Error, match="2n = 8 tokens"):
        blocklab.curvature(run, tokens=str(tmp_path / "bad.npy"))
