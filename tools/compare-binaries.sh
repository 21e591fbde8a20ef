#!/usr/bin/env bash
# Trains the same short runs with two blocklab binaries and compares what they write byte for byte (the loss
# curve, metrics.csv, and the final checkpoint: weights and Adam moments). A kernel change that must keep
# every fp32 result (a new blocking, a fused pass, a prefetch) has to pass this against the binary before it;
# the bf16 runs check the bf16 GEMM path the CPU dispatches to in the same way.
#   tools/compare-binaries.sh BEFORE AFTER [WORKDIR]
# Exit status: 0 when every run matches, 1 when one differs, 2 on bad input.
set -uo pipefail
if [[ $# -lt 2 || ! -x "$1" || ! -x "$2" ]]; then
  echo "usage: tools/compare-binaries.sh BEFORE AFTER [WORKDIR] (BEFORE and AFTER: blocklab executables)" >&2
  exit 2
fi
before=$1 after=$2
work=${3:-$(mktemp -d)}
mkdir -p "$work"
status=0
# The checkpoints of both runs: every tensor byte for byte, and the same step and metadata. The config in a
# checkpoint's metadata may gain keys (a new config key, at its default, is not a different run): the keys both
# configs hold must agree, and a key only the AFTER binary writes is listed on stderr. COMPLETE holds the files'
# checksums, which then differ; its step line must not.
same_checkpoints() {
  python3 - "$1" "$2" <<'PY'
import json, os, struct, sys

def read(path):
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    return header.pop("__metadata__", {}), header, blob[8 + n:]

before, after = sys.argv[1], sys.argv[2]
names = lambda d: sorted(os.path.relpath(os.path.join(r, f), d) for r, _, fs in os.walk(d) for f in fs)
if names(before) != names(after):
    sys.exit(f"the checkpoint files differ: {names(before)} vs {names(after)}")
for name in names(before):
    a, b = os.path.join(before, name), os.path.join(after, name)
    if name.endswith("COMPLETE"):
        if open(a).readline() != open(b).readline():
            sys.exit(f"{name}: another step")
        continue
    if not name.endswith(".safetensors"):
        if open(a, "rb").read() != open(b, "rb").read():
            sys.exit(f"{name} differs")
        continue
    (meta_a, head_a, data_a), (meta_b, head_b, data_b) = read(a), read(b)
    if head_a != head_b or data_a != data_b:
        sys.exit(f"{name}: the tensors differ")
    config_a, config_b = json.loads(meta_a.pop("config", "{}")), json.loads(meta_b.pop("config", "{}"))
    for m in (meta_a, meta_b):
        m.pop("checksums.xxh3_64", None)  # over the config too; the tensors were compared above
    if meta_a != meta_b:
        sys.exit(f"{name}: the metadata differ")
    changed = [k for k in config_a if k in config_b and config_a[k] != config_b[k]]
    if changed:
        sys.exit(f"{name}: the config differs in {changed}")
    added = [k for k in config_b if k not in config_a]
    if added:
        print(f"note: {name}: the config has new keys {added}", file=sys.stderr)
PY
}
run() {  # name, then train flags
  local name=$1
  shift
  for side in before after; do
    local bin=$before
    [[ $side == after ]] && bin=$after
    rm -rf "$work/$side-$name"
    if ! "$bin" train "$@" --checkpoint-every 1000 --out "$work/$side-$name" > /dev/null 2> "$work/$side-$name.err"; then
      echo "$name: the $side binary failed (see $work/$side-$name.err)"
      status=1
      return
    fi
  done
  if cmp -s "$work/before-$name/metrics.csv" "$work/after-$name/metrics.csv" &&
     same_checkpoints "$work/before-$name/checkpoints" "$work/after-$name/checkpoints"; then
    echo "same:      $name"
  else
    echo "DIFFERENT: $name"
    status=1
  fi
}
for t in 1 2; do
  run "small-t$t" --layers 4 --width 32 --steps 30 --batch 8 --threads "$t"
  for p in post peri deepnorm; do
    run "$p-t$t" --layers 4 --width 32 --steps 30 --batch 8 --threads "$t" --norm-placement "$p"
  done
  run "width128-t$t" --layers 2 --width 128 --heads 4 --steps 6 --batch 32 --threads "$t"  # the source model's GEMM shapes
  run "width96-t$t" --layers 2 --width 96 --heads 4 --steps 6 --batch 20 --threads "$t"    # partial register tiles
  run "hs32-T79-t$t" --layers 2 --width 64 --heads 2 --copy-len 40 --steps 6 --batch 6 --threads "$t"
  run "hs16-T79-post-t$t" --layers 2 --width 64 --heads 4 --copy-len 40 --steps 6 --batch 6 --threads "$t" \
      --norm-placement post
  run "rmsnorm-t$t" --layers 3 --width 64 --heads 2 --steps 8 --batch 8 --threads "$t" --norm rmsnorm
  # the residual designs with parameters of their own (their init reads the parameter table's roles and parts)
  run "ngpt-t$t" --layers 3 --width 32 --heads 2 --steps 8 --batch 8 --threads "$t" --norm-placement ngpt
  run "mhc-dynamic-t$t" --layers 3 --width 32 --heads 2 --steps 8 --batch 8 --threads "$t" --norm-placement mhc \
      --residual-streams 3 --hc-dynamic true
  run "admin-t$t" --layers 3 --width 32 --heads 2 --steps 8 --batch 8 --threads "$t" --norm-placement admin
  run "rezero-t$t" --layers 3 --width 32 --heads 2 --steps 8 --batch 8 --threads "$t" --norm-placement rezero
  # every stage of the attention sub-layer: per-head norms on a fused projection (hybrid), separate projections
  # with q/k norms, RoPE and grouped-query attention (qwen3), the value mix and the gate, cross-attention (sd)
  run "hybrid-t$t" --layers 3 --width 32 --heads 2 --steps 8 --batch 8 --threads "$t" --norm-placement hybrid_star \
      --positions rope
  run "qwen3-t$t" --block qwen3 --layers 3 --width 32 --heads 4 --kv-heads 2 --head-dim 8 --steps 8 --batch 8 \
      --threads "$t"
  run "vres-gate-t$t" --layers 3 --width 32 --heads 2 --steps 8 --batch 8 --threads "$t" --value-residual true \
      --attn-gate true --positions rope
  run "ngpt-rope-vres-t$t" --layers 3 --width 32 --heads 2 --steps 8 --batch 8 --threads "$t" --norm-placement ngpt \
      --positions rope --value-residual true
  run "sd-t$t" --block sd --layers 2 --width 32 --heads 2 --steps 6 --batch 4 --threads "$t"
  # bf16 mixed precision: the bf16 GEMM path this CPU dispatches to (fp32 where it has none)
  run "bf16-width128-t$t" --layers 2 --width 128 --heads 4 --steps 6 --batch 32 --threads "$t" --precision bf16
  run "bf16-width96-t$t" --layers 2 --width 96 --heads 4 --steps 6 --batch 20 --threads "$t" --precision bf16
done
[[ $# -ge 3 ]] || rm -rf "$work"
exit $status
