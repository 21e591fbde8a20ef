"""blocklab: build, train and probe stacks of transformer blocks on the CPU, from Python.

The same C++ core as the ``blocklab`` command line: every config key of ``blocklab train`` (``layers``,
``norm_placement``, ``lr``, ...) is a keyword argument here, with the same names, defaults and error
messages (a bad value raises :class:`blocklab.Error`, a :class:`ValueError`).

    import blocklab
    run = blocklab.train(layers=2, width=32, heads=2, vocab=16, copy_len=8, batch=8, steps=100)
    run.metrics["loss"]           # numpy array, one value per step
    logits = run.model.forward(tokens)             # (B, T, V)
    params = run.model.parameters()                # zero-copy numpy views by PyTorch name
    blocklab.train(out=run.out, resume=True, steps=200)  # continues from its newest checkpoint (checkpoint_every)
"""
from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import warnings
from typing import Any, Mapping

# The kernels' OpenMP threads should wait briefly, not spin for milliseconds (src/util/threads.h); libgomp
# reads these when it loads, which happens with the import of _core below.
if "OMP_WAIT_POLICY" not in os.environ and "GOMP_SPINCOUNT" not in os.environ:
    os.environ["OMP_WAIT_POLICY"] = "passive"
    os.environ["GOMP_SPINCOUNT"] = "3000"

import numpy as np

from . import _core

__all__ = ["Error", "NonFiniteError", "Model", "Run", "train", "sample", "gradnorm", "sweep", "probe_residual", "curvature",
           "config_keys", "resolve_config", "build_info"]
__version__ = "0.1.0"

#: Raised for anything invalid that comes from outside (a config value, a file, a directory), with the
#: same one-line message that ``blocklab`` prints after ``blocklab: error:``. A subclass of ValueError.
Error = _core.Error
Error.__module__ = "blocklab"


class NonFiniteError(RuntimeError):
    """A training run stopped at a non-finite loss or gradient (``on_nonfinite = "abort"``).

    ``run`` holds the metrics up to that step; ``on_nonfinite="skip"`` trains on instead.
    """

    def __init__(self, message: str, run: "Run"):
        super().__init__(message)
        self.run = run


# ---- configs ------------------------------------------------------------------------------------


def build_info() -> dict[str, Any]:
    """What this build has, as ``blocklab --version`` prints it: {"version", "isa" (the instruction-set level in
    use), "isa_levels", "cpu_features", "kernels", "optional_parts": [{"name", "present", "serves", "without"}]}.
    The optional parts are OpenBLAS, oneDNN, MPI, the text task (utf8proc, PCRE2) and TOML config files."""
    return json.loads(_core.build_info())


def config_keys() -> dict[str, dict[str, Any]]:
    """Every config key: {name: {"type", "help", "default"}}, as ``blocklab train --help`` lists them."""
    return {name: {"type": kind, "help": help_text, "default": json.loads(default)}
            for name, kind, help_text, default in _core.config_keys()}


def _text(key: str, value: Any) -> str:
    """A config value in the text form the key table parses (as a command-line flag would give it)."""
    if isinstance(value, (bool, np.bool_)):
        return "true" if value else "false"
    if isinstance(value, (int, np.integer)):
        return str(int(value))
    if isinstance(value, (float, np.floating)):
        return repr(float(value))
    if isinstance(value, str):
        return value
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise Error(f"{key}: expected a number, a string or a bool, got {type(value).__name__}")


def _config_args(config: Any = None, overrides: Mapping[str, Any] | None = None) -> tuple[str, list[tuple[str, str]]]:
    """(TOML path, [(key, text)]) from a TOML path or a dict of keys, then keyword overrides."""
    toml_path = ""
    values: dict[str, Any] = {}
    if config is None:
        pass
    elif isinstance(config, (str, os.PathLike)):
        toml_path = os.fspath(config)
    elif isinstance(config, Mapping):
        values.update(config)
    else:
        raise TypeError(f"config: expected a dict of keys or a TOML file path, got {type(config).__name__}")
    values.update(overrides or {})
    items = []
    for key, value in values.items():
        key = key.replace("-", "_")
        if value is None or key == "derived":  # "derived": the constants a config.json shows for the reader
            continue
        items.append((key, _text(key, value)))
    return toml_path, items


def resolve_config(config: Any = None, **kwargs: Any) -> dict[str, Any]:
    """The fully resolved config (every key, derived values filled in), as a run's config.json holds it."""
    return json.loads(_core.resolve_config(*_config_args(config, kwargs)))


# ---- the model ----------------------------------------------------------------------------------


def _tokens(tokens: Any, what: str) -> tuple[np.ndarray, bool]:
    array = np.asarray(tokens)
    if array.dtype.kind not in "iu":
        raise Error(f"{what}: expected integer token ids, got dtype {array.dtype}")
    single = array.ndim == 1
    if single:
        array = array[None, :]
    if array.ndim != 2:
        raise Error(f"{what}: expected a (batch, seq_len) array of token ids, got shape {array.shape}")
    return np.ascontiguousarray(array, dtype=np.int32), single


class Model:
    """A stack of transformer blocks with its parameters and gradients in the C++ core's memory.

    ``Model(config=None, *, dtype="float32", **keys)``: the config as for :func:`train` (a dict, a TOML
    path, keyword keys); the weights are initialised from ``seed`` exactly as a training run's are.
    ``dtype="float64"`` builds the double-precision model (for finite-difference checks).
    """

    def __init__(self, config: Any = None, *, dtype: str = "float32", **kwargs: Any):
        if dtype not in ("float32", "float64"):
            raise Error(f"dtype: expected float32 or float64, got '{dtype}'")
        self._core = _core.ModelCore(*_config_args(config, kwargs), dtype == "float64")
        self._names = [(name, tuple(shape)) for name, shape in self._core.tensors()]

    @classmethod
    def from_run(cls, run_dir: str | os.PathLike) -> "Model":
        """The model of a run directory: its config.json, and its weights from model.safetensors (written
        by :func:`train`) or else from its newest checkpoint."""
        run_dir = os.fspath(run_dir)
        config = json.loads(_core.read_config_json(os.path.join(run_dir, "config.json")))
        model = cls(config)
        weights = os.path.join(run_dir, "model.safetensors")
        if not os.path.exists(weights):
            checkpoints = os.path.join(run_dir, "checkpoints")
            steps = sorted(d for d in (os.listdir(checkpoints) if os.path.isdir(checkpoints) else [])
                           if d.startswith("step_") and os.path.exists(os.path.join(checkpoints, d, "COMPLETE")))
            if not steps:
                raise Error(f"{run_dir}: no model.safetensors and no complete checkpoint to load weights from")
            weights = os.path.join(checkpoints, steps[-1], "model.safetensors")
        model.load(weights)
        return model

    @property
    def config(self) -> dict[str, Any]:
        """The resolved config (a copy)."""
        return json.loads(self._core.config_json())

    @property
    def dtype(self) -> np.dtype:
        return np.dtype(np.float64 if self._core.float64 else np.float32)

    def tensor_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every parameter's name and shape, in the order of the parameter table."""
        return dict(self._names)

    def parameters(self) -> dict[str, np.ndarray]:
        """Every parameter as a numpy view of the model's own memory (writing one changes the model),
        keyed by its PyTorch name (``tok_emb.weight``, ``blocks.0.attn.qkv.weight``, ...)."""
        return {name: self._core.param(name) for name, _ in self._names}

    def gradients(self) -> dict[str, np.ndarray]:
        """The gradients of the last :meth:`backward`, as views like :meth:`parameters`."""
        return {name: self._core.grad(name) for name, _ in self._names}

    def state_dict(self) -> dict[str, np.ndarray]:
        """The parameters by PyTorch name, for ``torch_model.load_state_dict({k: torch.from_numpy(v) ...})``
        (views of the model's memory, as a PyTorch state_dict shares its module's)."""
        return self.parameters()

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Copies every parameter from ``state`` (numpy arrays or anything np.asarray takes, e.g. a
        PyTorch state_dict's tensors after ``.numpy()``); names and shapes must match exactly."""
        missing = [name for name, _ in self._names if name not in state]
        extra = [name for name in state if name not in dict(self._names)]
        if missing or extra:
            raise Error(f"state_dict: missing {missing}, unexpected {extra}")
        arrays = {}
        for name, shape in self._names:
            value = np.asarray(state[name])
            if value.shape != shape:
                raise Error(f"state_dict: {name} has shape {value.shape}, the model expects {shape}")
            arrays[name] = value
        params = self.parameters()
        for name, value in arrays.items():
            params[name][...] = value

    def forward(self, tokens: Any) -> np.ndarray:
        """Logits (B, T, V) for token ids (B, T) (a 1-D sequence gives (T, V))."""
        array, single = _tokens(tokens, "tokens")
        logits = self._core.forward(array)
        return logits[0] if single else logits

    __call__ = forward

    def loss(self, tokens: Any, targets: Any, mask: Any = None) -> float:
        """Mean cross-entropy of predicting ``targets`` (B, T) from ``tokens`` (B, T) over the positions
        ``mask`` (B, T) selects (all by default). Keeps what :meth:`backward` needs."""
        inputs, _ = _tokens(tokens, "tokens")
        outputs, _ = _tokens(targets, "targets")
        if mask is not None:
            mask = np.ascontiguousarray(np.asarray(mask).reshape(inputs.shape) != 0, dtype=np.uint8)
        return self._core.loss(inputs, outputs, mask)

    def backward(self) -> None:
        """Gradients of the last :meth:`loss` with respect to every parameter (overwrites :meth:`gradients`)."""
        self._core.backward()

    def residual_norms(self, tokens: Any = None) -> dict[str, np.ndarray]:
        """Residual-stream norms after each block (index 0: the embeddings) on ``tokens``, or on the first
        batch of the config's data stream: mean_vector_norm, mean_token_norm, layer."""
        array = None if tokens is None else _tokens(tokens, "tokens")[0]
        return _with_layers(self._core.residual_norms(array))

    def save(self, path: str | os.PathLike) -> None:
        """Writes the parameters to a safetensors file (PyTorch names; F32, or F64 for a float64 model)."""
        self._core.save(os.fspath(path))

    def load(self, path: str | os.PathLike) -> None:
        """Reads the parameters from a safetensors file (e.g. a checkpoint's model.safetensors); every
        name and shape is checked before any weight changes."""
        self._core.load(os.fspath(path))

    def __repr__(self) -> str:
        c = self.config
        count = sum(math.prod(shape) for _, shape in self._names)
        return (f"blocklab.Model({c['norm_placement']}-{c['norm']}, {c['layers']} blocks x width {c['width']}, "
                f"{c['heads']} heads, vocab {c['vocab']}, {count} parameters, {self.dtype})")


# ---- training -----------------------------------------------------------------------------------


class _Progress:
    """tqdm when it is installed; else a text line: redrawn in place on a terminal, and about 20 lines per
    run elsewhere (a notebook's output or a log file is not flooded)."""

    def __init__(self, total: int, every: int, initial: int = 0):
        self.total = total
        self.bar = None
        try:
            from tqdm.auto import tqdm
            self.bar = tqdm(total=total, initial=initial, unit="step")
        except Exception:
            pass
        self.live = self.bar is None and sys.stdout.isatty()
        self.every = every if every > 0 else max(1, total // 20)

    def update(self, step: int, loss: float, grad_norm: float) -> None:
        if self.bar is not None:
            self.bar.update(1)
            self.bar.set_postfix(loss=f"{loss:.4f}", refresh=False)
            return
        line = f"step {step}/{self.total}  loss {loss:.4f}  |g| {grad_norm:.3g}"
        if self.live:
            print("\r" + line, end="", flush=True)
        elif step % self.every == 0 or step == self.total:
            print(line, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        elif self.live:
            print(flush=True)


class Run:
    """A finished training run: ``out`` (its directory: config.json, metrics.csv, summary.json,
    model.safetensors unless ``weights=False``), ``config`` (resolved), ``metrics`` (numpy arrays per step), ``summary``, ``model``."""

    def __init__(self, out: str, config: dict, metrics: dict[str, np.ndarray], summary: dict, model: Model | None):
        self.out, self.config, self.metrics, self.summary, self.model = out, config, metrics, summary, model

    def dataframe(self):
        """The metrics as a pandas DataFrame indexed by step (needs pandas)."""
        import pandas as pd
        return pd.DataFrame(self.metrics).set_index("step")

    def __repr__(self) -> str:
        loss = self.metrics["loss"]
        text = f"{loss[0]:.4f} -> {loss[-1]:.4f}" if len(loss) else "no steps"
        return f"blocklab.Run({self.out}: {len(loss)} steps, loss {text})"


def train(config: Any = None, *, progress: bool = True, overwrite: bool = False, resume: bool = False,
          **kwargs: Any) -> Run:
    """Trains a model, as ``blocklab train`` does with the same keys, and returns the :class:`Run`.

    ``config``: a dict of config keys or a TOML file path; keyword arguments override it. Without ``out``
    the run goes to a new temporary directory. ``overwrite`` replaces a run already in ``out`` (the CLI's
    --force). The metrics equal the CLI's metrics.csv for the same config, bit for bit. The run also
    writes TensorBoard's event file OUT/events.out.tfevents.* unless ``tensorboard=False`` (the CLI's
    --no-tensorboard), and its final weights OUT/model.safetensors unless ``weights=False`` (the CLI's --no-weights).
    Recorders, keys like any other, none of which changes the run's numbers: ``probe_every=N`` writes
    residual-stream norms to OUT/residual.csv every N steps; ``curvature_every=N`` writes the sharpness, Adam's
    preconditioned sharpness and their thresholds to OUT/curvature.csv (``curvature_per_block=False`` leaves
    out the per-block values); ``stream_every=N`` records the residual stream's statistics in OUT/stream.csv
    and draws OUT/stream.{png,svg} at the end; ``update_probe_every=N`` writes, per block, the spread of Adam's
    per-parameter step size, the update-to-weight ratio and the critical sharpness along the update to
    OUT/updates.csv (``update_probe_passes=K``: the line search's forward passes).

    ``resume=True`` continues the run in ``out`` from its newest complete checkpoint, as ``blocklab train
    --resume OUT`` does: bit for bit the numbers and weights of a run that never stopped. The config is the
    checkpoint's; keys given here (the run's own config may be passed again) must keep its values, except
    steps, threads, log_every, checkpoint_every, keep_checkpoints, on_nonfinite, tensorboard, weights and the
    recorders' keys (a longer ``steps``
    extends the run). The returned metrics cover the whole run: the steps up to the checkpoint as
    metrics.csv holds them (9 significant digits), the rest as computed. A run is checkpointed by
    ``checkpoint_every`` and when interrupted (KeyboardInterrupt names the checkpoint written).
    """
    toml_path, items = _config_args(config, kwargs)
    start: Any = None
    if resume:
        out = dict(items).get("out")
        if out is None:
            raise Error("resume=True needs out=DIR, the directory of the run to continue")
        if overwrite:
            raise Error("overwrite=True cannot be combined with resume=True")
        start = _core.resume_point(out, toml_path, items)
        for path, reason in start.skipped:
            warnings.warn(f"skipping damaged checkpoint {path}: {reason}", stacklevel=2)
        for note in start.notes:
            warnings.warn(note, stacklevel=2)
        resolved = json.loads(start.config_json)
    else:
        resolved = json.loads(_core.resolve_config(toml_path, items))
        if not any(key == "out" for key, _ in items) and not _toml_sets_out(toml_path):
            items.append(("out", tempfile.mkdtemp(prefix="blocklab-run-")))
            resolved = json.loads(_core.resolve_config(toml_path, items))
    columns: dict[str, list] = {"step": [], "loss": [], "lr": [], "grad_norm": [], "skipped": []}
    text = resolved["task"] == "text"
    if text:
        columns["val_loss"] = []  # NaN at the steps that do not evaluate it
    first_step = start.step if start is not None else 0
    bar = _Progress(resolved["steps"], resolved["log_every"], first_step) if progress else None
    skipped = 0

    def on_step(step: int, loss: float, lr: float, grad_norm: float, nonfinite: bool,
                val_loss: float | None) -> None:
        nonlocal skipped
        skipped += int(nonfinite)
        values = (step, loss, lr, grad_norm, skipped, math.nan if val_loss is None else val_loss)
        for key, value in zip(columns, values):
            columns[key].append(value)
        if bar is not None:
            bar.update(step, loss, grad_norm)

    model = Model(resolved)
    try:
        summary = _core.train(toml_path, items, overwrite, on_step, model._core, start)
    finally:
        if bar is not None:
            bar.close()
    if start is not None:  # the steps before the checkpoint, as the resumed run kept them in metrics.csv
        kept = _read_metrics(os.path.join(resolved["out"], "metrics.csv"), through_step=start.step)
        before = int(kept["skipped"][-1]) if len(kept["skipped"]) else 0
        columns["skipped"] = [before + count for count in columns["skipped"]]
        for key in columns:
            columns[key] = list(kept[key]) + columns[key]
    metrics = {key: np.asarray(values, dtype=np.int64 if key in ("step", "skipped") else np.float64)
               for key, values in columns.items()}
    # config.json after the run: the same resolved config the run wrote (out included)
    run = Run(resolved["out"], resolved, metrics, summary, model)
    if summary["nonfinite_error"]:
        run.model = None
        raise NonFiniteError(summary["nonfinite_error"], run)
    return run  # the run wrote its final weights, OUT/model.safetensors (unless weights=False)


def _read_metrics(path: str, through_step: int) -> dict[str, list]:
    """The rows of a run's metrics.csv up to ``through_step``, by column (step and skipped as ints)."""
    with open(path) as f:
        header = f.readline().strip().split(",")
        rows = [line.strip().split(",") for line in f if line.strip()]
    columns: dict[str, list] = {name: [] for name in header}
    for row in rows:
        if int(row[0]) > through_step:
            break
        for name, text in zip(header, row):
            if name in ("step", "skipped"):
                columns[name].append(int(float(text)))
            else:  # an empty cell: not measured at that step (val_loss between evaluations)
                columns[name].append(float(text) if text else math.nan)
    return columns


def sample(run_dir: str | os.PathLike, prompt: str | None = None, *, prompt_ids: Any = None, tokens: int = 200,
           temperature: float = 1.0, top_k: int = 0, seed: int = 0, threads: int = 0) -> str | list[int]:
    """The continuation of a prompt by a trained run's model, as ``blocklab sample`` prints it (without the
    prompt): text for a text ``prompt`` (a text run, with its tokenizer), a list of ids for ``prompt_ids``
    (any run; copy and reverse runs need them).

    ``temperature=0`` is greedy (the most likely token each time); otherwise tokens are drawn from the softmax
    of the logits / temperature, among the ``top_k`` most likely only when ``top_k > 0``, from a generator
    seeded by ``seed``: the same arguments give the same text. The weights are the run's model.safetensors or
    its newest checkpoint that verifies, whichever is later; the window slides once the text is longer than
    the model's positions.
    """
    ids = None if prompt_ids is None else [int(i) for i in np.asarray(prompt_ids).reshape(-1)]
    return _core.sample(os.fspath(run_dir), prompt, ids, int(tokens), float(temperature), int(top_k), int(seed),
                        int(threads))


def _toml_sets_out(toml_path: str) -> bool:
    if not toml_path:
        return False
    default = config_keys()["out"]["default"]
    return _core.resolve_config(toml_path, []) != _core.resolve_config(toml_path, [("out", default)])


# ---- experiments --------------------------------------------------------------------------------


def curvature(run: Any, *, checkpoint: int | None = None, batch_seed: int | None = None, tokens: str | None = None,
              batch: int = 0, top: int = 1, max_iter: int = 50, tol: float = 1e-5, trace_samples: int = 8,
              per_block: bool = True, block_max_iter: int = 30, order: int = 2, seed: int = 0,
              threads: int = 0) -> dict[str, Any]:
    """Curvature of a run's training loss on one batch, as ``blocklab curvature RUN --json`` computes it.

    ``run``: a :class:`Run` or a run directory; ``checkpoint``: the step of a checkpoint (default: the newest,
    else the final model.safetensors); the batch is drawn from the run's task (``batch_seed``, ``batch``
    sequences) or read from ``tokens`` (.npy int32/int64 or safetensors, shape (batch, sequence)). Returns a dict:
    ``sharpness`` (lambda_max of the Hessian), ``top`` (the ``top`` largest eigenvalues), ``preconditioned_sharpness``
    (lambda_max(P^-1 H), P = (1 - beta1^t) diag(sqrt(v_hat) + eps) from Adam's state; None without one),
    ``trace`` (Hutchinson) and ``trace_std_error``, ``per_block`` (lambda_max of each block's Hessian), ``method``,
    ``batch``, ``step``, ``lr`` (of the next update), ``edge_gd`` (2/lr), ``edge_adam`` ((2+2 beta1)/((1-beta1) lr)),
    ``loss``, ``iterations``, ``converged``, ``preconditioned_converged``, ``gradients``, ``seconds``, ``threads``;
    a non-finite number is None.
    """
    run_dir = run.out if isinstance(run, Run) else os.fspath(run)
    return json.loads(_core.curvature(run_dir, -1 if checkpoint is None else checkpoint, batch_seed, tokens, batch,
                                      top, max_iter, tol, trace_samples, per_block, block_max_iter, order, seed,
                                      threads))


def gradnorm(config: Any = None, *, placements=("post", "pre"), seeds=(0, 1, 2), batches: int = 1,
             **kwargs: Any) -> dict[str, dict[str, np.ndarray]]:
    """Experiment A: the gradient norm of every parameter at initialization, as ``blocklab gradnorm``.

    Returns {placement: {name: array}}: a tensor inside the blocks under its family name
    (``mlp.fc2.weight``) with shape (seeds, blocks), block l at index l-1; others (``tok_emb.weight``)
    with shape (seeds,). Each norm is averaged over the first ``batches`` batches of the data stream.
    """
    if isinstance(placements, str):
        placements = [placements]
    if isinstance(seeds, (int, np.integer)):
        seeds = [seeds]
    return _core.gradnorm(*_config_args(config, kwargs), list(placements), [int(s) for s in seeds], batches)


def _cli_path() -> str:
    return os.path.join(os.path.dirname(os.path.abspath(__file__)), "bin", "blocklab")


def sweep(config: Any = None, *, grid: Mapping[str, Any], seeds=(0,), jobs: int = 0, out: str | None = None,
          probe_every: int = 0, log=print, **kwargs: Any) -> list[dict[str, Any]]:
    """A grid of training runs, as ``blocklab sweep``: each run a separate ``blocklab train`` process in
    OUT/<key>=<value>+...+seed=<S>/, ``jobs`` at a time. ``grid``: {key: [values]}.

    Returns one dict per finished run: name, out, cell ({key: value}), seed, steps, loss (arrays),
    outcome, final_loss, min_loss, first_step_below, seconds; text runs also final_val_loss, min_val_loss and
    unigram_entropy (their outcome "learned": the loss fell below it). Re-running with the same out continues.
    ``log``: called with each progress line (None: quiet). The runs keep no final weights unless
    ``weights=True`` is given (as ``blocklab sweep``: their many model.safetensors would cost disk and time).
    """
    specs = []
    for key, values in grid.items():
        if isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
            values = [values]
        specs.append(f"{key}=" + ",".join(_text(key, v) for v in values))
    if isinstance(seeds, (int, np.integer)):
        seeds = [seeds]
    if out is None:
        out = tempfile.mkdtemp(prefix="blocklab-sweep-")
    if probe_every:
        kwargs["probe_every"] = probe_every
    return _core.sweep(*_config_args(config, kwargs), specs, [int(s) for s in seeds], jobs, os.fspath(out),
                       _cli_path(), log if log is not None else (lambda line: None))


def _with_layers(norms: dict[str, Any]) -> dict[str, Any]:
    norms["layer"] = np.arange(np.shape(norms["mean_token_norm"])[-1])
    return norms


def probe_residual(source: Any = None, *, text: str | None = None, tokens: Any = None,
                   **kwargs: Any) -> dict[str, Any]:
    """Residual-stream norms per layer (0: embeddings, l: after block l): mean_vector_norm (norm of the
    mean token vector) and mean_token_norm (mean per-token norm), with ``layer``.

    ``source``:
      - None, a dict or a TOML path (with keyword keys): a model of that config at initialization, on
        the first batch of its data stream (``blocklab residual``'s init probe);
      - a :class:`Model`, or a :class:`Run` (its trained model): on ``tokens`` or that first batch; a
        run trained with ``probe_every`` gives its probed steps instead: arrays (steps, layers), ``step``;
      - a directory: a run directory (as for a Run), or a Hugging Face model directory (config.json,
        safetensors) probed on ``text`` (with its tokenizer.json) or ``tokens``, as ``blocklab probe
        residual``; adds relative_update and the stream statistics rms, max_abs, max_channel and sink (NaN at
        layer 0).
    """
    if isinstance(source, Run):
        if os.path.exists(os.path.join(source.out, "residual.csv")) and tokens is None:
            return _with_layers(_core.residual_of_run(source.out))
        return source.model.residual_norms(tokens)
    if isinstance(source, Model):
        return source.residual_norms(tokens)
    if isinstance(source, (str, os.PathLike)) and os.path.isdir(source):
        directory = os.fspath(source)
        if os.path.exists(os.path.join(directory, "residual.csv")) and tokens is None and text is None:
            return _with_layers(_core.residual_of_run(directory))
        if _is_hf_model_dir(directory):
            token_list = None if tokens is None else [int(t) for t in np.asarray(tokens).reshape(-1)]
            return _with_layers(_core.residual_of_hf_model(directory, text, token_list))
        return Model.from_run(directory).residual_norms(tokens)
    return _with_layers(_core.residual_at_init(*_config_args(source, kwargs)))


def _is_hf_model_dir(directory: str) -> bool:
    try:
        with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
            config = json.load(f)
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and ("model_type" in config or "architectures" in config)
