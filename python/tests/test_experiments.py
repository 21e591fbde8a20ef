import csv
import os

import numpy as np
import pytest

import blocklab
from conftest import TINY, cli, cli_flags

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data")


def test_gradnorm_matches_the_cli(tmp_path):
    result = blocklab.gradnorm(TINY, seeds=[0, 1], batches=2)
    assert list(result) == ["post", "pre"]
    fc2 = result["post"]["mlp.fc2.weight"]
    assert fc2.shape == (2, 2) and np.all(fc2 > 0)
    assert result["pre"]["tok_emb.weight"].shape == (2,)
    assert "final_norm.weight" in result["pre"] and "final_norm.weight" not in result["post"]
    cli("gradnorm", *cli_flags(TINY), "--seeds", "0,1", "--batches", 2, "--out", tmp_path)
    with open(tmp_path / "gradnorm.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == sum(v.size for p in result.values() for v in p.values())
    seeds = {"0": 0, "1": 1}
    for row in rows:
        name = row["parameter"]
        if row["block"]:
            family = name.split(".", 2)[2]
            value = result[row["placement"]][family][seeds[row["seed"]], int(row["block"]) - 1]
        else:
            value = result[row["placement"]][name][seeds[row["seed"]]]
        assert float(row["grad_norm"]) == pytest.approx(value, rel=1e-8), name


def test_gradnorm_bad_placement_has_the_clis_message():
    with pytest.raises(ValueError, match="unknown norm_placement 'sideways'"):
        blocklab.gradnorm(TINY, placements=["sideways"])


def test_residual_probe_at_init_equals_the_model_probe():
    at_init = blocklab.probe_residual(TINY, norm_placement="pre")
    model = blocklab.probe_residual(blocklab.Model(TINY, norm_placement="pre"))
    assert np.array_equal(at_init["layer"], np.arange(3))
    for key in ("mean_vector_norm", "mean_token_norm"):
        assert at_init[key].shape == (3,)
        np.testing.assert_array_equal(at_init[key], model[key])
    # Pre-LN: the stream is never normalised, each block adds to it
    assert at_init["mean_token_norm"][2] > at_init["mean_token_norm"][0]
    post = blocklab.probe_residual(TINY, norm_placement="post")
    # Post-LN: every block's output is a LayerNorm output, of norm about sqrt(C) = 4
    np.testing.assert_allclose(post["mean_token_norm"][1:], 4.0, rtol=0.02)


def test_residual_probe_of_a_run_trained_with_probe_every(tmp_path):
    run = blocklab.train(TINY, steps=6, out=tmp_path / "run", probe_every=3, progress=False)
    probed = blocklab.probe_residual(run)
    assert np.array_equal(probed["step"], [0, 3, 6])
    assert probed["mean_token_norm"].shape == (3, 3)
    # step 0 is the model at init on the probe batch; the directory gives the same as the Run
    again = blocklab.probe_residual(run.out)
    np.testing.assert_array_equal(again["mean_token_norm"], probed["mean_token_norm"])
    trained = blocklab.probe_residual(run, tokens=[[1, 2, 3, 1, 2, 3, 1]])
    assert trained["mean_token_norm"].shape == (3,)


def test_residual_probe_of_a_hugging_face_model_matches_the_cli(tmp_path):
    model_dir = os.path.join(DATA, "hf", "gpt2")
    result = blocklab.probe_residual(model_dir, tokens=[1, 5, 7, 2])
    cli("probe", "residual", "--model", model_dir, "--tokens", "1,5,7,2", "--out", tmp_path, "--no-plot")
    with open(tmp_path / "residual.csv") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == len(result["layer"])
    for row, vector, token in zip(rows, result["mean_vector_norm"], result["mean_token_norm"]):
        assert float(row["mean_vector_norm"]) == pytest.approx(vector, rel=1e-8)
        assert float(row["mean_token_norm"]) == pytest.approx(token, rel=1e-8)
    with pytest.raises(ValueError, match="tokenizer.json: not found"):
        blocklab.probe_residual(model_dir, text="hello")


def test_sweep_runs_equal_single_training_runs(tmp_path):
    config = dict(TINY, steps=4)
    lines = []
    runs = blocklab.sweep(config, grid={"norm_placement": ["post", "pre"]}, seeds=[0], jobs=2, out=tmp_path / "sweep",
                          log=lines.append)
    assert [r["cell"] for r in runs] == [{"norm_placement": "post"}, {"norm_placement": "pre"}]
    assert lines  # the sweep's progress lines went to log
    for r in runs:
        assert np.array_equal(r["steps"], [1, 2, 3, 4])
        single = blocklab.train(config, norm_placement=r["cell"]["norm_placement"], out=tmp_path / r["name"] / "py",
                                progress=False)
        assert np.array_equal(r["loss"].astype(np.float32), single.metrics["loss"].astype(np.float32))
    with pytest.raises(ValueError, match="colour"):
        blocklab.sweep(config, grid={"colour": ["red"]}, out=tmp_path / "bad", log=None)
