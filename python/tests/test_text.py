import math
import os
import subprocess

import numpy as np
import pytest

import blocklab

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data")
TEXT = os.path.join(DATA, "web_ruth_jonah.txt")
TOKENIZER = os.path.join(DATA, "hf", "qwen3", "tokenizer.json")
SMALL_TEXT = dict(task="text", data=TEXT, layers=1, width=16, heads=2, seq_len=16, batch=4, threads=1)


def read_metrics(path):
    with open(path) as f:
        header = f.readline().strip().split(",")
        rows = [[float(v) if v else math.nan for v in line.rstrip("\n").split(",")] for line in f if line.strip()]
    return {name: np.array([row[i] for row in rows]) for i, name in enumerate(header)}


def test_train_on_a_text_has_val_loss_at_the_evaluated_steps(tmp_path):
    run = blocklab.train(SMALL_TEXT, steps=10, eval_every=4, out=tmp_path / "run", progress=False)
    assert list(run.metrics) == ["step", "loss", "lr", "grad_norm", "skipped", "val_loss"]
    val = run.metrics["val_loss"]
    evaluated = [s for s, v in zip(run.metrics["step"], val) if not math.isnan(v)]
    assert evaluated == [4, 8, 10]  # every eval_every steps and the last
    assert run.summary["val_loss"] == pytest.approx(val[-1])
    assert run.summary["val_loss_step"] == 10
    assert run.config["vocab"] == 256  # the byte tokenizer
    # The same numbers as metrics.csv (empty cells where not evaluated).
    on_disk = read_metrics(tmp_path / "run" / "metrics.csv")
    for key in run.metrics:
        assert np.allclose(on_disk[key], run.metrics[key], rtol=1e-8, equal_nan=True), key
    assert {"tokens.bin", "model.safetensors"} <= set(os.listdir(run.out))


def test_a_text_sweep_reports_validation_loss_and_the_unigram_entropy(tmp_path):
    runs = blocklab.sweep(SMALL_TEXT, steps=6, eval_every=3, grid={"norm_placement": ["post", "pre"]}, seeds=[0],
                          jobs=1, out=tmp_path / "sweep", log=None)
    assert len(runs) == 2
    for r in runs:
        assert 2.0 < r["unigram_entropy"] < math.log(256)  # English bytes: about 4.5 bits
        assert r["min_val_loss"] <= r["final_val_loss"]
        summary = blocklab.train(SMALL_TEXT, steps=6, eval_every=3, norm_placement=r["cell"]["norm_placement"],
                                 out=tmp_path / r["name"], progress=False).summary
        assert summary["unigram_entropy"] == r["unigram_entropy"]  # the run's own summary.json
        assert summary["val_loss"] == pytest.approx(r["final_val_loss"], rel=1e-6)
        # "learned" is a loss below the entropy; 6 steps stay above it
        assert r["outcome"] != "learned"


def test_train_with_a_tokenizer_json_takes_its_vocab(tmp_path):
    run = blocklab.train(SMALL_TEXT, tokenizer=TOKENIZER, steps=2, out=tmp_path / "run", progress=False)
    assert run.config["vocab"] > 256
    assert os.path.exists(tmp_path / "run" / "tokenizer.json")


def test_bad_text_data_raises_a_one_line_error(tmp_path):
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "latin1.txt").write_bytes(b"caf\xe9 au lait " * 20)
    with pytest.raises(blocklab.Error, match="the file is empty"):
        blocklab.train(SMALL_TEXT, data=tmp_path / "empty.txt", steps=2, out=tmp_path / "a", progress=False)
    with pytest.raises(blocklab.Error, match="invalid UTF-8 at byte offset 3"):
        blocklab.train(SMALL_TEXT, data=tmp_path / "latin1.txt", steps=2, out=tmp_path / "b", progress=False)
    with pytest.raises(blocklab.Error, match="needs task = text"):
        blocklab.train(dict(SMALL_TEXT, task="copy"), steps=2, out=tmp_path / "c", progress=False)
    assert not os.path.exists(tmp_path / "a" / "config.json")


def test_sample_continues_a_prompt_like_the_cli(tmp_path):
    run = blocklab.train(SMALL_TEXT, steps=20, out=tmp_path / "run", progress=False)
    greedy = blocklab.sample(run.out, "Naomi said", tokens=30, temperature=0)
    assert isinstance(greedy, str) and len(greedy) > 0
    assert greedy == blocklab.sample(run.out, "Naomi said", tokens=30, temperature=0)
    # The CLI prints the prompt and the same continuation (raw bytes: a barely trained byte model may emit bytes
    # that are not UTF-8, which sample() returns as U+FFFD).
    printed = subprocess.run([blocklab._cli_path(), "sample", run.out, "--prompt", "Naomi said", "--tokens", "30",
                              "--temperature", "0"], capture_output=True, check=True).stdout
    assert printed.decode("utf-8", "replace") == "Naomi said" + greedy + "\n"
    a = blocklab.sample(run.out, "Ruth", tokens=40, temperature=1.0, top_k=5, seed=7)
    assert a == blocklab.sample(run.out, "Ruth", tokens=40, temperature=1.0, top_k=5, seed=7)
    assert a != blocklab.sample(run.out, "Ruth", tokens=40, temperature=1.0, top_k=5, seed=8)
    with pytest.raises(blocklab.Error, match="top_k must be in 0..256"):
        blocklab.sample(run.out, "Ruth", top_k=300)


def test_sample_from_a_reverse_run_takes_prompt_ids(tmp_path):
    run = blocklab.train(task="reverse", layers=1, width=16, heads=2, vocab=8, copy_len=4, batch=4, steps=3,
                         threads=1, out=tmp_path / "run", progress=False)
    ids = blocklab.sample(run.out, prompt_ids=[1, 2, 3, 4], tokens=4, temperature=0)
    assert len(ids) == 4 and all(0 <= i < 8 for i in ids)
    with pytest.raises(blocklab.Error, match="prompt_ids"):
        blocklab.sample(run.out, "hello")


def test_resume_a_text_run_keeps_its_val_loss(tmp_path):
    config = dict(SMALL_TEXT, eval_every=2, checkpoint_every=4)
    whole = blocklab.train(config, steps=8, out=tmp_path / "whole", progress=False)
    blocklab.train(config, steps=4, out=tmp_path / "part", progress=False)
    resumed = blocklab.train(config, steps=8, out=tmp_path / "part", resume=True, progress=False)
    assert list(resumed.metrics) == list(whole.metrics)
    for key in whole.metrics:  # the steps before the checkpoint come back from metrics.csv (9 digits)
        assert np.allclose(resumed.metrics[key], whole.metrics[key], rtol=1e-8, equal_nan=True), key
    assert resumed.summary["val_loss"] == whole.summary["val_loss"]
    with open(tmp_path / "whole" / "metrics.csv") as a, open(tmp_path / "part" / "metrics.csv") as b:
        assert a.read() == b.read()
