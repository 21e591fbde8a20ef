"""What the PyTorch fixture generators share (make_copy_fixtures.py, make_block_fixtures.py,
make_placement_fixtures.py; the safetensors writer also make_hf_fixtures.py):

  * write_safetensors / read_safetensors: a writer, and a reader written against the format spec
    (numpy only, strict checks) that --verify and check_checkpoint.py use;
  * run_fixture: what every copy-task fixture stores (logits, loss, gradients, ADAM_STEPS Adam steps);
  * Fixtures: one script's set of fixture files, with generate() (write them) and verify() (re-read
    each file, recompute it from its stored params and tokens and from the seed, compare every tensor);
  * main: the command line (--verify, and --check where the script has self-checks);
  * self-check helpers: check_param_shapes, copy_loss_of, central_differences, normwise.

The scripts keep only what is their own: the models, the cases and their seeds, the metadata, the
self-checks, and any entries compared more loosely (loose_key_bias: the key rows of qkv.bias after Adam).
"""
import argparse
import json
import os
import struct
import sys

import torch
from torch.nn.utils import stateless

import copy_model as cm

REPO = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
OUT_DIR = os.path.join(REPO, "tests", "data")

ADAM = dict(lr=1e-2, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0)
ADAM_STEPS = 5

# Maximum |stored - recomputed| that --verify accepts (float64 throughout).
TOLERANCE = 1e-12


# ----------------------------------------------------------------------------- writer

DTYPE_CODE = {torch.float64: "F64", torch.float32: "F32", torch.int64: "I64"}


def tensor_bytes(t, code):
    """t converted to the storage dtype `code`, as little-endian bytes."""
    t = t.detach().contiguous().cpu()
    if code == "F64":
        return t.to(torch.float64).numpy().astype("<f8").tobytes()
    if code == "F32":
        return t.to(torch.float32).numpy().astype("<f4").tobytes()
    if code == "F16":
        return t.to(torch.float16).numpy().astype("<f2").tobytes()
    if code == "BF16":
        return t.to(torch.bfloat16).view(torch.int16).numpy().astype("<i2").tobytes()
    if code == "I64":
        return t.to(torch.int64).numpy().astype("<i8").tobytes()
    raise ValueError(code)


def write_safetensors(path, tensors, metadata=None):
    """tensors: list of (name, tensor) or (name, tensor, dtype code) in file order; without a code the
    tensor's own dtype is stored (F64, F32 or I64). 8-byte little-endian header length, JSON header padded
    with spaces to a multiple of 8 (__metadata__ first, only when metadata is non-empty), contiguous
    little-endian data without gaps. Written to path + ".tmp" and renamed, so a failure leaves no half
    file. Returns the size of the data section."""
    header, blobs, off = {}, [], 0
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    for name, t, *code in tensors:
        code = code[0] if code else DTYPE_CODE[t.dtype]
        raw = tensor_bytes(t, code)
        header[name] = {"dtype": code, "shape": list(t.shape), "data_offsets": [off, off + len(raw)]}
        blobs.append(raw)
        off += len(raw)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((-len(hjson)) % 8)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(hjson)))
        f.write(hjson)
        for b in blobs:
            f.write(b)
    os.replace(tmp, path)
    return off


# ----------------------------------------------------------------------------- independent reader

def read_safetensors(path):
    """Minimal reader written against the format spec (numpy only, no torch), with strict checks."""
    import numpy as np
    with open(path, "rb") as f:
        data = f.read()
    assert len(data) >= 8, "file too short"
    (n,) = struct.unpack("<Q", data[:8])
    assert n % 8 == 0, f"header length {n} not a multiple of 8"
    htext = data[8:8 + n].decode("utf-8")
    assert len(htext) - len(htext.rstrip(" ")) < 8, "header padding longer than 7 spaces"
    header = json.loads(htext)
    meta = header.pop("__metadata__", {})
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in meta.items())
    buf = data[8 + n:]
    np_dt = {"F64": "<f8", "F32": "<f4", "I64": "<i8"}
    spans, out = [], {}
    for name, info in header.items():
        b, e = info["data_offsets"]
        dt = np.dtype(np_dt[info["dtype"]])
        count = 1
        for s in info["shape"]:
            count *= s
        assert e - b == count * dt.itemsize, f"{name}: size mismatch"
        spans.append((b, e, name))
        out[name] = np.frombuffer(buf[b:e], dtype=dt).reshape(info["shape"])
    spans.sort()
    pos = 0
    for b, e, name in spans:
        assert b == pos, f"{name}: gap/overlap at {b} (expected {pos})"
        pos = e
    assert pos == len(buf), f"buffer has {len(buf) - pos} trailing bytes"
    return meta, out


# ----------------------------------------------------------------------------- reference run

def run_fixture(model, tokens, params=None, after_step=None):
    """What every fixture stores, from the model's current weights (or `params`, name -> tensor, copied into
    it first) and one batch: the logits, the loss and every gradient, then ADAM_STEPS Adam steps on that
    batch (the loss before each, the final weights). `after_step(model)`, when given, runs after each step
    (nGPT's renormalisation)."""
    if params is not None:
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(params[name])
    init = {n: p.detach().clone() for n, p in model.named_parameters()}

    model.zero_grad(set_to_none=True)
    loss, logits = cm.copy_loss(model, tokens, return_logits=True)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in model.named_parameters()}

    opt = torch.optim.Adam(model.parameters(), **ADAM)
    losses = []
    for _ in range(ADAM_STEPS):
        opt.zero_grad(set_to_none=True)
        l = cm.copy_loss(model, tokens)
        losses.append(l.item())
        l.backward()
        opt.step()
        if after_step is not None:
            after_step(model)
    final = {n: p.detach().clone() for n, p in model.named_parameters()}
    return dict(names=[n for n, _ in model.named_parameters()], init=init, tokens=tokens,
                logits=logits.detach(), loss=loss.detach().reshape(1), grads=grads,
                adam_losses=torch.tensor(losses, dtype=torch.float64), final=final)


def fixture_tensors(r):
    """A fixture file's tensors in file order, from run_fixture's results."""
    tensors = [("tokens", r["tokens"]), ("logits", r["logits"]), ("loss", r["loss"]),
               ("adam_losses", r["adam_losses"])]
    tensors += [(f"param.{n}", r["init"][n]) for n in r["names"]]
    tensors += [(f"grad.{n}", r["grads"][n]) for n in r["names"]]
    tensors += [(f"adam_final.{n}", r["final"][n]) for n in r["names"]]
    return tensors


# ----------------------------------------------------------------------------- generate / verify

class Fixtures:
    """One script's fixture files. Each case is a tuple of arguments for the functions:
      path(*case)       the file;
      metadata(*case)   its __metadata__ (torch_version included);
      compute(*case, params=None, tokens=None)
                        run_fixture's results for the seeded init and batch, or for the given ones;
      cfg(*case)        the configuration (batch, copy_len, vocab, ...);
      expected(*case)   optional: parameter name -> shape, written from the spec; enables the checks of
                        the file's tensor names, shapes and dtypes;
      loose(cfg, path, key, diff)
                        optional: called with every compared tensor's |stored - recomputed| (numpy,
                        float64) before the TOLERANCE check; may compare some entries to a looser
                        tolerance itself (printing a FAIL line and returning False when they exceed it)
                        and set them to 0 to leave them out."""

    def __init__(self, cases, path, metadata, compute, cfg, expected=None, loose=None):
        self.cases = [c if isinstance(c, tuple) else (c,) for c in cases]
        self.path, self.metadata, self.compute, self.cfg = path, metadata, compute, cfg
        self.expected, self.loose = expected, loose

    def generate(self):
        os.makedirs(OUT_DIR, exist_ok=True)
        for case in self.cases:
            r = self.compute(*case)
            tensors = fixture_tensors(r)
            path = self.path(*case)
            write_safetensors(path, tensors, self.metadata(*case))
            print(f"{os.path.relpath(path, REPO)}: {os.path.getsize(path)} bytes, {len(tensors)} tensors, "
                  f"loss={r['loss'].item():.17g} "
                  f"adam_losses={[float(f'{x:.10g}') for x in r['adam_losses'].tolist()]}")

    def verify(self):
        """Re-reads every file with read_safetensors; checks its metadata, its layout (with `expected`) and
        its batch; recomputes it from the stored params and tokens, and regenerates the init and batch from
        the seed; compares every stored tensor to TOLERANCE. A FAIL line per tensor that differs, an ok
        line per file; exits 1 after the last file if anything failed."""
        import numpy as np
        ok = True
        for case in self.cases:
            cfg = self.cfg(*case)
            path = self.path(*case)
            meta, t = read_safetensors(path)
            exp_meta = self.metadata(*case)
            exp_meta.pop("torch_version")
            assert "torch_version" in meta
            assert sorted(meta) == sorted(list(exp_meta) + ["torch_version"]), f"{path}: metadata keys {sorted(meta)}"
            for k, v in exp_meta.items():
                assert meta.get(k) == v, f"{path}: metadata {k}={meta.get(k)!r}, expected {v!r}"
            names = [k[len("param."):] for k in t if k.startswith("param.")]
            B, n, V = cfg["batch"], cfg["copy_len"], cfg["vocab"]
            if self.expected is not None:
                exp = self.expected(*case)
                assert sorted(names) == sorted(exp), f"{path}: parameter set differs from the spec"
                for prefix in ("param.", "grad.", "adam_final."):
                    for name, shape in exp.items():
                        assert tuple(t[prefix + name].shape) == shape, f"{path}: {prefix}{name} shape"
                        assert t[prefix + name].dtype == np.float64
                other = sorted(k for k in t if not k.startswith(("param.", "grad.", "adam_final.")))
                assert other == ["adam_losses", "logits", "loss", "tokens"], f"{path}: unexpected tensors {other}"
                assert t["tokens"].shape == (B, 2 * n) and t["tokens"].dtype == np.int64
                assert t["logits"].shape == (B, 2 * n - 1, V) and t["loss"].shape == (1,)
                assert t["adam_losses"].shape == (ADAM_STEPS,)
            params = {k: torch.from_numpy(t["param." + k].copy()) for k in names}
            tokens = torch.from_numpy(t["tokens"].copy())
            half = tokens.shape[1] // 2
            assert torch.equal(tokens[:, :half], tokens[:, half:]), "tokens second half is not a copy"
            assert int(tokens.min()) >= 0 and int(tokens.max()) < V
            # Recompute from the stored params/tokens only, compare to stored results.
            r = self.compute(*case, params=params, tokens=tokens)
            assert sorted(names) == sorted(r["names"]), "parameter set mismatch"
            # Fresh regeneration from the seed must also reproduce the stored init and batch.
            r0 = self.compute(*case)
            maxdiff = 0.0
            checks = [("logits", r["logits"]), ("loss", r["loss"]), ("adam_losses", r["adam_losses"])]
            checks += [("grad." + k, r["grads"][k]) for k in names]
            checks += [("adam_final." + k, r["final"][k]) for k in names]
            checks += [("param." + k, r0["init"][k]) for k in names]
            checks += [("tokens", r0["tokens"])]
            for key, val in checks:
                stored = t[key].astype(np.float64)
                val = val.numpy().astype(np.float64)
                assert list(stored.shape) == list(val.shape), f"{key}: shape {stored.shape} vs {val.shape}"
                diff = np.abs(stored - val)
                if self.loose is not None and not self.loose(cfg, path, key, diff):
                    ok = False
                d = float(diff.max())
                maxdiff = max(maxdiff, d)
                if d > TOLERANCE:
                    ok = False
                    print(f"FAIL {path}: {key} max|diff|={d:.3e}")
            assert t["adam_losses"][0] == t["loss"][0], "adam_losses[0] != loss"
            # Sanity: grads are non-trivial everywhere (every term exercised).
            zero = [k for k in names if not np.any(t["grad." + k])]
            if zero:
                ok = False
                print(f"FAIL {path}: all-zero grads for {zero}")
            print(f"ok {os.path.relpath(path, REPO)}: {len(t)} tensors, loss={t['loss'][0]:.17g}, "
                  f"max recompute diff {maxdiff:.1e}")
        if not ok:
            sys.exit(1)
        print("verify: all fixtures OK")


def main(doc, fixtures, self_checks=None):
    """The command line. Without self_checks: `--verify` or nothing (generate). With self_checks (a function
    that runs them and raises on a failure): they run first, then --verify, --check (nothing more) or
    nothing (generate)."""
    ap = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    if self_checks is None:
        ap.add_argument("--verify", action="store_true", help="re-read and check existing fixtures")
        args = ap.parse_args()
    else:
        g = ap.add_mutually_exclusive_group()
        g.add_argument("--verify", action="store_true", help="self-checks, then re-read and check the fixtures")
        g.add_argument("--check", action="store_true", help="self-checks only")
        args = ap.parse_args()
        self_checks()
        if args.check:
            return
    if args.verify:
        fixtures.verify()
    else:
        fixtures.generate()


# ----------------------------------------------------------------------------- self-check helpers

def gradcheck_model(model, tokens, label):
    """torch.autograd.gradcheck of the logits of one sequence w.r.t. every parameter tensor; a one-line summary."""
    names = [k for k, _ in model.named_parameters()]
    inputs = tokens[:1, :-1]

    def f(*ts):
        return stateless.functional_call(model, dict(zip(names, ts)), (inputs,))

    ins = tuple(p.detach().clone().requires_grad_(True) for _, p in model.named_parameters())
    assert torch.autograd.gradcheck(f, ins, eps=1e-6, atol=1e-7, rtol=1e-5, raise_exception=False), \
        f"{label}: gradcheck failed"
    return f"gradcheck {sum(t.numel() for t in ins)} entries"


def normwise(a, b):
    """Largest absolute difference relative to the largest entry of b (absolute where b is zero up to
    rounding, below 1e-12: e.g. HybridNorm's key-norm bias, whose gradient softmax cancels)."""
    scale = float(b.abs().max())
    d = float((a - b).abs().max())
    return d / scale if scale > 1e-12 else d


def check_param_shapes(model, expected, message):
    """AssertionError `message: extra [...], missing [...], shape [...]` unless the model's parameter
    names and shapes are exactly `expected` (name -> shape)."""
    got = {n: tuple(p.shape) for n, p in model.named_parameters()}
    assert got == expected, f"{message}: " \
        f"extra {sorted(set(got) - set(expected))}, missing {sorted(set(expected) - set(got))}, " \
        f"shape {[n for n in got if n in expected and got[n] != expected[n]]}"


def copy_loss_of(tokens):
    """copy_model.copy_loss as a function of the logits for `tokens`' inputs (tokens[:, :-1])."""
    n = tokens.shape[1] // 2
    targets = tokens[:, 1:]

    def f(logits):
        V = logits.shape[-1]
        return torch.nn.functional.cross_entropy(logits[:, n - 1:].reshape(-1, V),
                                                 targets[:, n - 1:].reshape(-1))
    return f


def central_differences(label, names, params, grads, loss, h=1e-5, per_tensor=2, seed=7):
    """Central differences of loss() (a float) at `per_tensor` random entries of every parameter tensor,
    against the autograd gradients: AssertionError naming the entry unless |fd - ad| < 1e-8 + 1e-6 |ad|.
    Returns (entries checked, worst |fd - ad| / (1e-6 + |ad|))."""
    gen = torch.Generator().manual_seed(seed)
    worst, count = 0.0, 0
    with torch.no_grad():
        for name, p, g in zip(names, params, grads):
            for idx in torch.randint(0, p.numel(), (per_tensor,), generator=gen).tolist():
                flat = p.view(-1)
                old = flat[idx].item()
                flat[idx] = old + h
                lp = loss()
                flat[idx] = old - h
                lm = loss()
                flat[idx] = old
                fd, ad = (lp - lm) / (2 * h), g.view(-1)[idx].item()
                assert abs(fd - ad) < 1e-8 + 1e-6 * abs(ad), \
                    f"{label}: {name}[{idx}] autograd {ad:.10g} vs central difference {fd:.10g}"
                worst, count = max(worst, abs(fd - ad) / (1e-6 + abs(ad))), count + 1
    return count, worst


# The key rows [C, 2C) of attn.qkv.bias get a gradient that is zero up to rounding (softmax is invariant
# to a per-query constant); Adam (eps 1e-8) turns that ~1e-17 noise into steps of ~1e-11, which depend
# on the machine's summation order. Only those entries of adam_final are compared loosely.
KEY_BIAS_TOL = 1e-9


def loose_key_bias(cfg, path, key, diff):
    """--verify (Fixtures(loose=...)): the key rows of adam_final.*.attn.qkv.bias compared to KEY_BIAS_TOL,
    then left out of the TOLERANCE comparison."""
    if not (key.startswith("adam_final.") and key.endswith(".attn.qkv.bias")):
        return True
    C = cfg["width"]
    worst = float(diff[C:2 * C].max())
    diff[C:2 * C] = 0.0
    if worst > KEY_BIAS_TOL:
        print(f"FAIL {path}: {key}[C:2C] max|diff|={worst:.3e}")
        return False
    return True
