import math
import os
import shutil
import sys

import numpy as np
import pytest

import blocklab
from conftest import cli, cli_flags

# Learns the copy task within the step budget (loss from ln 8 = 2.08 to well below 1).
LEARNS = dict(layers=2, width=32, heads=2, vocab=8, copy_len=4, batch=16, steps=120, lr=3e-3, seed=0, threads=1)


def read_csv(path):
    with open(path) as f:
        header = f.readline().strip().split(",")
        rows = [list(map(float, line.split(","))) for line in f if line.strip()]
    return {name: np.array([row[i] for row in rows]) for i, name in enumerate(header)}


def test_train_learns_the_copy_task(tmp_path):
    run = blocklab.train(LEARNS, out=tmp_path / "run", progress=False)
    loss = run.metrics["loss"]
    assert list(run.metrics) == ["step", "loss", "lr", "grad_norm", "skipped"]
    assert np.array_equal(run.metrics["step"], np.arange(1, 121))
    assert loss[:10].mean() > 0.8 * math.log(8)  # about chance at first
    assert loss[-10:].mean() < 0.1  # then copies
    assert run.summary["final_loss"] == pytest.approx(loss[-1])
    assert run.out == str(tmp_path / "run")
    files = sorted(os.listdir(run.out))
    events = [f for f in files if f.startswith("events.out.tfevents.")]  # TensorBoard's (test_tensorboard.py)
    assert len(events) == 1
    assert [f for f in files if f not in events] == ["config.json", "metrics.csv", "model.safetensors", "summary.json"]


def test_train_gives_the_clis_numbers_bit_for_bit(tmp_path):
    config = dict(LEARNS, steps=30, norm_placement="post", warmup=5)
    run = blocklab.train(config, out=tmp_path / "py", progress=False)
    cli("train", *cli_flags(config), "--out", tmp_path / "cli", "--checkpoint-every", 30)
    with open(tmp_path / "py" / "metrics.csv") as a, open(tmp_path / "cli" / "metrics.csv") as b:
        assert a.read() == b.read()
    expected = read_csv(tmp_path / "cli" / "metrics.csv")
    # 9 significant digits hold a float exactly: the losses agree to the last bit of the float32 model
    assert np.array_equal(run.metrics["loss"].astype(np.float32), expected["loss"].astype(np.float32))
    assert np.array_equal(run.metrics["step"], expected["step"])
    # the final weights: the CLI's last checkpoint holds the same bits as run.model
    cli_model = blocklab.Model(run.config)
    cli_model.load(tmp_path / "cli" / "checkpoints" / "step_0000030" / "model.safetensors")
    for name, value in run.model.parameters().items():
        assert np.array_equal(value, cli_model.parameters()[name]), name


def test_config_from_toml_dict_and_keywords_agree(tmp_path):
    toml = tmp_path / "tiny.toml"
    toml.write_text('layers = 2\nwidth = 32\nheads = 2\nvocab = 8\ncopy_len = 4\nbatch = 16\nlr = 3e-3\n'
                    'norm_placement = "pre"\nthreads = 1\n')
    a = blocklab.train(toml, steps=5, out=tmp_path / "a", progress=False)
    b = blocklab.train(dict(LEARNS, steps=5, norm_placement="pre"), out=tmp_path / "b", progress=False)
    c = blocklab.train(**dict(LEARNS, steps=5, norm_placement="pre", out=str(tmp_path / "c")), progress=False)
    assert np.array_equal(a.metrics["loss"], b.metrics["loss"])
    assert np.array_equal(b.metrics["loss"], c.metrics["loss"])


@pytest.mark.parametrize("keys, flags", [
    (dict(norm_placement="sideways"), ["--norm-placement", "sideways"]),
    (dict(width=30, heads=4), ["--width", "30", "--heads", "4"]),
    (dict(lr=-1.0), ["--lr", "-1.0"]),
    (dict(steps="many"), ["--steps", "many"]),
])
def test_bad_config_raises_value_error_with_the_clis_message(tmp_path, keys, flags):
    result = cli("train", *flags, "--out", tmp_path / "cli", check=False)
    assert result.returncode == 2
    prefix = "blocklab: error: "
    assert result.stderr.startswith(prefix)
    message = result.stderr[len(prefix):].strip()
    with pytest.raises(ValueError) as raised:
        blocklab.train(out=tmp_path / "py", progress=False, **keys)
    assert str(raised.value) == message
    assert isinstance(raised.value, blocklab.Error)
    assert not (tmp_path / "py").exists()  # nothing written for a bad config


def test_unknown_key_raises_value_error():
    with pytest.raises(ValueError, match="colour"):
        blocklab.train(colour="blue", progress=False)


def test_an_existing_run_is_refused_unless_overwrite(tmp_path):
    blocklab.train(LEARNS, steps=2, out=tmp_path / "run", progress=False)
    with pytest.raises(blocklab.Error, match="already holds a run"):
        blocklab.train(LEARNS, steps=2, out=tmp_path / "run", progress=False)
    run = blocklab.train(LEARNS, steps=3, out=tmp_path / "run", progress=False, overwrite=True)
    assert len(run.metrics["loss"]) == 3


def test_without_out_each_run_gets_its_own_directory():
    a = blocklab.train(LEARNS, steps=2, progress=False)
    b = blocklab.train(LEARNS, steps=2, progress=False)
    try:
        assert a.out != b.out and os.path.isdir(a.out) and os.path.isdir(b.out)
        assert np.array_equal(a.metrics["loss"], b.metrics["loss"])
    finally:
        shutil.rmtree(a.out), shutil.rmtree(b.out)


def test_text_progress_prints_about_twenty_lines(tmp_path, capsys, monkeypatch):
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # the plain text progress, as without tqdm
    blocklab.train(LEARNS, steps=100, out=tmp_path / "run", progress=True)
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("step ")]
    assert 15 <= len(lines) <= 21
    assert lines[-1].startswith("step 100/100  loss ")


def test_run_model_and_from_run_are_the_trained_model(tmp_path):
    run = blocklab.train(LEARNS, steps=20, out=tmp_path / "run", progress=False)
    again = blocklab.Model.from_run(run.out)
    tokens = np.array([[1, 2, 3, 4, 1, 2, 3]])
    np.testing.assert_array_equal(run.model.forward(tokens), again.forward(tokens))
    assert not np.array_equal(run.model.forward(tokens), blocklab.Model(LEARNS).forward(tokens))


def test_nonfinite_abort_raises_with_the_metrics_so_far(tmp_path, monkeypatch):
    monkeypatch.setenv("BLOCKLAB_INJECT_NONFINITE", "3")
    with pytest.raises(blocklab.NonFiniteError, match="step 3: non-finite gradient") as raised:
        blocklab.train(LEARNS, steps=10, out=tmp_path / "run", progress=False)
    assert len(raised.value.run.metrics["loss"]) == 2


def test_dataframe_when_pandas_is_installed(tmp_path):
    pytest.importorskip("pandas")
    frame = blocklab.train(LEARNS, steps=4, out=tmp_path / "run", progress=False).dataframe()
    assert list(frame.columns) == ["loss", "lr", "grad_norm", "skipped"] and list(frame.index) == [1, 2, 3, 4]


def test_ctrl_c_finishes_the_step_writes_a_checkpoint_and_raises_keyboard_interrupt(tmp_path, monkeypatch):
    import signal

    handler = signal.getsignal(signal.SIGINT)
    update = blocklab._Progress.update

    def interrupt_at_step_3(self, step, loss, grad_norm):
        update(self, step, loss, grad_norm)
        if step == 3:
            os.kill(os.getpid(), signal.SIGINT)  # as Ctrl-C (or a notebook's interrupt) would

    monkeypatch.setattr(blocklab._Progress, "update", interrupt_at_step_3)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)
    with pytest.raises(KeyboardInterrupt, match="after step 3"):
        blocklab.train(LEARNS, steps=1000, out=tmp_path / "run", progress=True)
    assert os.listdir(tmp_path / "run" / "checkpoints") == ["step_0000003"]
    assert signal.getsignal(signal.SIGINT) is handler  # Python's own handler is back


# ---- resuming ---------------------------------------------------------------------------------------

# Warm-up across the interruption, so that a resumed run that restarted its schedule would show it.
RESUMABLE = dict(LEARNS, steps=40, warmup=25, checkpoint_every=10, keep_checkpoints=0)


def interrupt_at(monkeypatch, stop_step):
    """Makes the next blocklab.train send itself SIGINT (as Ctrl-C would) after step `stop_step`."""
    import signal

    update = blocklab._Progress.update

    def update_then_interrupt(self, step, loss, grad_norm):
        update(self, step, loss, grad_norm)
        if step == stop_step:
            os.kill(os.getpid(), signal.SIGINT)

    monkeypatch.setattr(blocklab._Progress, "update", update_then_interrupt)
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)


def read_bytes(path):
    with open(path, "rb") as f:
        return f.read()


def test_resume_continues_an_interrupted_run_bit_for_bit(tmp_path, monkeypatch):
    whole = blocklab.train(RESUMABLE, out=tmp_path / "whole", progress=False)
    with monkeypatch.context() as patch:
        interrupt_at(patch, 17)
        with pytest.raises(KeyboardInterrupt, match="after step 17"):
            blocklab.train(RESUMABLE, out=tmp_path / "part", progress=True)
    assert sorted(os.listdir(tmp_path / "part" / "checkpoints")) == ["step_0000010", "step_0000017"]
    assert not (tmp_path / "part" / "model.safetensors").exists()

    resumed = blocklab.train(RESUMABLE, out=tmp_path / "part", resume=True, progress=False)
    assert resumed.summary["start_step"] == 17 and resumed.summary["steps"] == 40
    assert resumed.out == str(tmp_path / "part")
    # the files of both runs are the same, byte for byte: metrics, final weights, last checkpoint; the config
    # too, but for the directory it names
    for name in ["metrics.csv", "model.safetensors"]:
        assert read_bytes(tmp_path / "part" / name) == read_bytes(tmp_path / "whole" / name), name
    assert dict(resumed.config, out=None) == dict(whole.config, out=None)
    last = os.path.join("checkpoints", "step_0000040")
    for name in sorted(os.listdir(tmp_path / "whole" / last)):
        assert read_bytes(tmp_path / "part" / last / name) == read_bytes(tmp_path / "whole" / last / name), name
    # the metrics cover the whole run: exactly those computed after the checkpoint, and the steps before it
    # as metrics.csv keeps them (a float32 loss exactly; lr and the gradient norm to 9 significant digits)
    assert np.array_equal(resumed.metrics["step"], np.arange(1, 41))
    assert np.array_equal(resumed.metrics["skipped"], whole.metrics["skipped"])
    for key in ["loss", "lr", "grad_norm"]:
        assert np.array_equal(resumed.metrics[key][17:], whole.metrics[key][17:]), key
        np.testing.assert_allclose(resumed.metrics[key][:17], whole.metrics[key][:17], rtol=1e-8, atol=0)
    assert np.array_equal(resumed.metrics["loss"].astype(np.float32), whole.metrics["loss"].astype(np.float32))
    assert resumed.summary["final_loss"] == whole.summary["final_loss"]
    assert resumed.summary["min_loss"] == whole.summary["min_loss"]
    for name, value in whole.model.parameters().items():
        assert np.array_equal(resumed.model.parameters()[name], value), name


def test_resume_extends_a_finished_run_as_the_cli_does(tmp_path):
    short = dict(RESUMABLE, steps=20)
    blocklab.train(short, out=tmp_path / "py", progress=False)
    longer = blocklab.train(out=tmp_path / "py", resume=True, steps=30, progress=False)  # keys from the checkpoint
    cli("train", *cli_flags(short), "--out", tmp_path / "cli")
    cli("train", "--resume", tmp_path / "cli", "--steps", "30")
    assert read_bytes(tmp_path / "py" / "metrics.csv") == read_bytes(tmp_path / "cli" / "metrics.csv")
    assert longer.config["steps"] == 30 and len(longer.metrics["loss"]) == 30
    cli_model = blocklab.Model(longer.config)
    cli_model.load(tmp_path / "cli" / "checkpoints" / "step_0000030" / "model.safetensors")
    for name, value in longer.model.parameters().items():
        assert np.array_equal(value, cli_model.parameters()[name]), name


@pytest.mark.parametrize("keys, flags", [
    (dict(lr=1e-2), ["--lr", "0.01"]),                 # another config than the run's
    (dict(norm_placement="post"), ["--norm-placement", "post"]),
    (dict(steps=5), ["--steps", "5"]),                 # below the checkpoint's step
])
def test_resume_with_another_config_raises_the_clis_message(tmp_path, keys, flags):
    blocklab.train(dict(RESUMABLE, steps=10), out=tmp_path / "run", progress=False)
    before = {name: read_bytes(tmp_path / "run" / name) for name in ["metrics.csv", "config.json"]}
    result = cli("train", "--resume", tmp_path / "run", *flags, check=False)
    assert result.returncode == 2 and result.stderr.startswith("blocklab: error: ")
    with pytest.raises(blocklab.Error) as raised:
        blocklab.train(dict(RESUMABLE, **keys), out=tmp_path / "run", resume=True, progress=False)
    assert str(raised.value) == result.stderr[len("blocklab: error: "):].strip()
    assert {name: read_bytes(tmp_path / "run" / name) for name in before} == before  # nothing changed


def test_resume_without_a_checkpoint_or_a_directory_raises_the_clis_message(tmp_path):
    blocklab.train(dict(LEARNS, steps=3), out=tmp_path / "bare", progress=False)  # no checkpoint_every
    for run_dir in [tmp_path / "bare", tmp_path / "missing"]:
        result = cli("train", "--resume", run_dir, check=False)
        assert result.returncode == 2
        with pytest.raises(blocklab.Error) as raised:
            blocklab.train(out=run_dir, resume=True, progress=False)
        assert str(raised.value) == result.stderr[len("blocklab: error: "):].strip()
    with pytest.raises(blocklab.Error, match="needs out=DIR"):
        blocklab.train(LEARNS, resume=True, progress=False)
    with pytest.raises(blocklab.Error, match="overwrite=True cannot be combined"):
        blocklab.train(LEARNS, out=tmp_path / "bare", resume=True, overwrite=True, progress=False)
