"""The TensorBoard event files of runs, read with TensorBoard's own reader (EventAccumulator and its record
reader) and tbparse: the same numbers as metrics.csv step for step, every step once across a resumed run's
files, checked CRCs, the config as text, a sweep's runs as separately named runs."""
import csv
import glob
import os
import shutil
import struct

import numpy as np
import pytest

import blocklab
from conftest import cli, cli_flags

event_accumulator = pytest.importorskip(
    "tensorboard.backend.event_processing.event_accumulator", reason="tensorboard is not installed")
from tensorboard.backend.event_processing import event_file_loader  # noqa: E402
from tensorboard.compat.tensorflow_stub import errors as tb_errors  # noqa: E402
from tensorboard.compat.tensorflow_stub.pywrap_tensorflow import PyRecordReader_New  # noqa: E402

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "tests", "data")
TEXT = os.path.join(DATA, "web_ruth_jonah.txt")
SMALL = dict(layers=2, width=16, heads=2, vocab=8, copy_len=4, batch=4, threads=1, lr=3e-3)
STEP_TAGS = ["loss/train", "train/lr", "train/grad_norm", "train/skipped_steps", "time/step_ms"]


def event_files(run_dir):
    return sorted(glob.glob(os.path.join(str(run_dir), "events.out.tfevents.*")))


def accumulator(run_dir):
    acc = event_accumulator.EventAccumulator(str(run_dir), size_guidance={"scalars": 0, "tensors": 0})
    acc.Reload()
    return acc


def scalars(acc, tag):
    events = acc.Scalars(tag)
    return np.array([e.step for e in events]), np.array([e.value for e in events], dtype=np.float64)


def read_metrics(run_dir):
    with open(os.path.join(str(run_dir), "metrics.csv")) as f:
        rows = list(csv.DictReader(f))
    return {k: np.array([float(r[k]) if r[k] != "" else np.nan for r in rows]) for k in rows[0]}


def summary_steps_per_file(run_dir, tag):
    """{file: [steps of `tag`]} from TensorBoard's raw event loader, one file at a time."""
    out = {}
    for path in event_files(run_dir):
        steps = []
        for event in event_file_loader.EventFileLoader(path).Load():
            if event.HasField("summary") and any(v.tag == tag for v in event.summary.value):
                steps.append(event.step)
        out[path] = steps
    return out


def assert_equals_metrics(run_dir, metrics_columns={"loss/train": "loss", "train/lr": "lr",
                                                   "train/grad_norm": "grad_norm", "train/skipped_steps": "skipped"}):
    acc = accumulator(run_dir)
    m = read_metrics(run_dir)
    for tag, column in metrics_columns.items():
        steps, values = scalars(acc, tag)
        np.testing.assert_array_equal(steps, m["step"].astype(int), err_msg=tag)
        # float32 in the event file: the metrics.csv value (9 significant digits) to float precision
        np.testing.assert_allclose(values, m[column].astype(np.float32), rtol=2e-7, atol=0, err_msg=tag)
    return acc, m


def test_event_file_equals_metrics_csv(tmp_path):
    run = blocklab.train(SMALL, steps=25, out=tmp_path / "run", progress=False)
    files = event_files(run.out)
    assert len(files) == 1
    assert os.path.basename(files[0]).startswith("events.out.tfevents.")
    acc, m = assert_equals_metrics(run.out)
    assert set(STEP_TAGS) <= set(acc.Tags()["scalars"])
    steps, ms = scalars(acc, "time/step_ms")
    assert list(steps) == list(range(1, 26)) and np.all(ms > 0)
    # the config as a text summary (the text plugin), equal to config.json
    assert "config" in acc.Tags()["tensors"]
    (config_event,) = acc.Tensors("config")
    assert config_event.step == 0
    text = config_event.tensor_proto.string_val[0].decode()
    assert config_event.tensor_proto.dtype == 7  # DT_STRING
    with open(os.path.join(run.out, "config.json")) as f:
        assert [line.strip() for line in text.splitlines()] == [line.strip() for line in f.read().splitlines()]


def test_text_task_writes_validation_loss_at_the_evaluated_steps(tmp_path):
    config = dict(task="text", data=TEXT, layers=1, width=16, heads=2, seq_len=16, batch=4, threads=1,
                  steps=12, eval_every=5)
    run = blocklab.train(config, out=tmp_path / "text", progress=False)
    acc, m = assert_equals_metrics(run.out)
    steps, values = scalars(acc, "loss/val")
    evaluated = ~np.isnan(m["val_loss"])
    assert list(steps) == [5, 10, 12]
    np.testing.assert_array_equal(steps, m["step"][evaluated].astype(int))
    np.testing.assert_allclose(values, m["val_loss"][evaluated].astype(np.float32), rtol=2e-7)


def test_probe_adds_stream_norms_and_block_gradient_norms(tmp_path):
    run = blocklab.train(SMALL, steps=10, out=tmp_path / "probed", probe_every=5, progress=False)
    acc = accumulator(run.out)
    tags = set(acc.Tags()["scalars"])
    assert {f"stream/mean_token_norm/layer_{l:02d}" for l in range(3)} <= tags
    assert {"grad_norm/block_01", "grad_norm/block_02"} <= tags and "grad_norm/block_03" not in tags
    with open(os.path.join(run.out, "residual.csv")) as f:
        rows = [r for r in csv.DictReader(f) if r["layer"] == "2"]
    steps, values = scalars(acc, "stream/mean_token_norm/layer_02")
    assert list(steps) == [int(r["step"]) for r in rows] == [0, 5, 10]
    np.testing.assert_allclose(values, [np.float32(r["mean_token_norm"]) for r in rows], rtol=2e-7)
    # the block norms make up the gradient's norm (no clipping here; the embeddings and the head aside)
    steps, block1 = scalars(acc, "grad_norm/block_01")
    _, block2 = scalars(acc, "grad_norm/block_02")
    _, total = scalars(acc, "train/grad_norm")
    assert list(steps) == [5, 10]
    assert np.all(np.hypot(block1, block2) < total[steps - 1] * (1 + 1e-6)) and np.all(block1 > 0)


def test_resumed_run_has_every_step_once(tmp_path):
    """A run stops at step 13 (a non-finite gradient, on_nonfinite = abort) after its checkpoint at step 10:
    its event file holds steps 11..13 that the resumed run computes again. After resuming, every step is in
    the directory once, and the numbers are those of a run that never stopped."""
    flags = cli_flags(dict(SMALL, steps=20, checkpoint_every=5, keep_checkpoints=0))
    whole, part = str(tmp_path / "whole"), str(tmp_path / "part")
    cli("train", *flags, "--out", whole)
    env = dict(os.environ, BLOCKLAB_INJECT_NONFINITE="13")
    import subprocess
    stopped = subprocess.run([blocklab._cli_path(), "train", *flags, "--out", part], env=env, capture_output=True,
                             text=True)
    assert stopped.returncode == 1, stopped.stderr
    before = summary_steps_per_file(part, "loss/train")
    assert list(before.values()) == [list(range(1, 14))]
    cli("train", "--resume", part)

    per_file = summary_steps_per_file(part, "loss/train")
    assert len(per_file) == 2
    first, second = per_file.values()
    assert first == list(range(1, 11)) and second == list(range(11, 21))  # cut at the checkpoint; then on
    for tag in STEP_TAGS:
        steps = [s for f in summary_steps_per_file(part, tag).values() for s in f]
        assert sorted(steps) == list(range(1, 21)), tag  # each step once across the files
    acc, m = assert_equals_metrics(part)
    steps, grad_norm = scalars(acc, "train/grad_norm")
    assert np.isfinite(grad_norm[steps == 13]).all()  # the resumed step 13, not the poisoned one
    # the same curve as the run that never stopped
    for tag in ["loss/train", "train/lr", "train/grad_norm"]:
        np.testing.assert_array_equal(scalars(acc, tag)[1], scalars(accumulator(whole), tag)[1], err_msg=tag)
    # and tbparse (the whole directory, as TensorBoard merges it) sees one point per step
    tbparse = pytest.importorskip("tbparse", reason="tbparse is not installed")
    df = tbparse.SummaryReader(part).scalars
    loss = df[df["tag"] == "loss/train"]
    assert sorted(loss["step"]) == list(range(1, 21))


def test_resume_twice_from_the_same_checkpoint(tmp_path):
    """The resumed segment itself crashes before the next checkpoint; the second resume cuts it too."""
    flags = cli_flags(dict(SMALL, steps=12, checkpoint_every=10))
    part = str(tmp_path / "part")
    import subprocess
    env = dict(os.environ, BLOCKLAB_INJECT_NONFINITE="11")
    assert subprocess.run([blocklab._cli_path(), "train", *flags, "--out", part], env=env,
                          capture_output=True).returncode == 1
    assert subprocess.run([blocklab._cli_path(), "train", "--resume", part], env=env,
                          capture_output=True).returncode == 1  # step 11 again poisoned
    cli("train", "--resume", part)
    per_file = summary_steps_per_file(part, "loss/train")
    assert sorted(s for f in per_file.values() for s in f) == list(range(1, 13))
    configs = [e.step for path in event_files(part) for e in event_file_loader.EventFileLoader(path).Load()
               if e.HasField("summary") and e.summary.value[0].tag == "config"]
    assert sorted(configs) == [0, 11]  # the original run's, and the last segment's (step after the checkpoint)
    assert_equals_metrics(part)


def test_every_record_checks_and_a_changed_byte_is_rejected(tmp_path):
    run = blocklab.train(SMALL, steps=10, out=tmp_path / "run", progress=False)
    (path,) = event_files(run.out)
    with open(path, "rb") as f:
        data = f.read()
    # TensorBoard's record reader checks both CRCs of every record
    reader = PyRecordReader_New(path)
    records = []
    while True:
        try:
            reader.GetNext()
        except tb_errors.OutOfRangeError:
            break
        records.append(reader.record())
    assert len(records) == 1 + 1 + 10  # file_version, config, steps 1..10
    # walk the framing ourselves: lengths add up to the file size
    offsets, pos = [], 0
    while pos < len(data):
        (length,) = struct.unpack_from("<Q", data, pos)
        offsets.append(pos)
        pos += 8 + 4 + length + 4
    assert pos == len(data) and len(offsets) == len(records)

    # one changed byte inside step 6's payload: the reader raises DataLossError at that record
    broken_dir = tmp_path / "broken"
    broken_dir.mkdir()
    broken = str(broken_dir / os.path.basename(path))
    at = offsets[2 + 5] + 12 + 3
    with open(broken, "wb") as f:
        f.write(data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:])
    reader = PyRecordReader_New(broken)
    for _ in range(2 + 5):
        reader.GetNext()
    with pytest.raises(tb_errors.DataLossError, match="crc"):
        reader.GetNext()
    # EventAccumulator stops at the damaged record: the steps before it only
    steps, _ = scalars(accumulator(broken_dir), "loss/train")
    assert list(steps) == [1, 2, 3, 4, 5]
    # a changed byte in a length field is caught by the length CRC
    at = offsets[4] + 2
    with open(broken, "wb") as f:
        f.write(data[:at] + bytes([data[at] ^ 0x01]) + data[at + 1:])
    reader = PyRecordReader_New(broken)
    for _ in range(4):
        reader.GetNext()
    with pytest.raises(tb_errors.DataLossError, match="header crc"):
        reader.GetNext()


def test_no_tensorboard(tmp_path):
    run = blocklab.train(SMALL, steps=3, out=tmp_path / "py", tensorboard=False, progress=False)
    assert event_files(run.out) == [] and run.config["tensorboard"] is False
    cli("train", *cli_flags(dict(SMALL, steps=3)), "--no-tensorboard", "--out", tmp_path / "cli")
    assert event_files(tmp_path / "cli") == []
    assert os.path.exists(tmp_path / "cli" / "metrics.csv")
    # --force replaces a run: its old event file goes with it
    cli("train", *cli_flags(dict(SMALL, steps=3)), "--out", tmp_path / "cli2")
    old = event_files(tmp_path / "cli2")
    cli("train", *cli_flags(dict(SMALL, steps=4)), "--force", "--no-tensorboard", "--out", tmp_path / "cli2")
    assert len(old) == 1 and event_files(tmp_path / "cli2") == []
    # --no-KEY and --KEY together are refused
    assert cli("train", "--tensorboard", "true", "--no-tensorboard", "--out", tmp_path / "x", check=False).returncode != 0


def test_sweep_runs_are_named_runs(tmp_path):
    tbparse = pytest.importorskip("tbparse", reason="tbparse is not installed")
    out = tmp_path / "sweep"
    runs = blocklab.sweep(SMALL, grid={"norm_placement": ["post", "pre"]}, seeds=[0], steps=8, jobs=2, out=out,
                          log=None)
    assert len(runs) == 2
    df = tbparse.SummaryReader(str(out), extra_columns={"dir_name"}).scalars
    loss = df[df["tag"] == "loss/train"]
    assert sorted(set(loss["dir_name"])) == sorted(os.path.basename(r["out"]) for r in runs)
    for r in runs:
        curve = loss[loss["dir_name"] == os.path.basename(r["out"])].sort_values("step")
        assert list(curve["step"]) == list(range(1, 9))
        np.testing.assert_allclose(curve["value"], np.float32(r["loss"]), rtol=2e-7)
