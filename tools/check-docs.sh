#!/usr/bin/env bash
# Checks the documentation (README.md and docs/*.md) against the built blocklab:
#   1. every relative link points to an existing file (and every #anchor to a heading of that file);
#   2. every `blocklab COMMAND ... --flag` written in a code block or inline code is a real flag of that
#      command (from `blocklab COMMAND --help`; `sweep` and `probe` with their verbs);
#   3. every fenced block marked ```sh check runs as written, line by line, in a scratch directory (with
#      build/blocklab meaning the blocklab under test), and exits 0.
# Usage: tools/check-docs.sh [--no-run] [BUILD_DIR]   (default: build). --no-run leaves out 3 (which trains
# small models: a minute or two on 2 cores); ctest's check_docs runs 1 and 2 (a few seconds), `make check-docs`
# all three. Exit status 1 lists every problem found.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
run=1
if [[ ${1:-} == --no-run ]]; then
  run=0
  shift
fi
build=${1:-build}
case $build in /*) ;; *) build=$root/$build ;; esac
cli=$build/blocklab
if [[ ! -x $cli ]]; then
  echo "check-docs: $cli not found (build first: cmake --build $build)" >&2
  exit 2
fi
exec python3 - "$root" "$cli" "$run" <<'PY'
import os, re, subprocess, sys, tempfile

root, cli, run_blocks = sys.argv[1], sys.argv[2], sys.argv[3] == "1"
docs = [os.path.join(root, "README.md")] + sorted(
    os.path.join(root, "docs", f) for f in os.listdir(os.path.join(root, "docs")) if f.endswith(".md"))
problems = []

def rel(path):
    return os.path.relpath(path, root)

def anchor(heading):
    a = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return a.replace(" ", "-")

def split_fences(text):
    """(prose with fenced blocks blanked, [(info, first line number, lines)])"""
    prose, blocks, fence = [], [], None
    for n, line in enumerate(text.split("\n"), 1):
        if fence is None and line.startswith("```"):
            fence = (line[3:].strip(), n + 1, [])
            prose.append("")
        elif fence is not None and line.startswith("```"):
            blocks.append(fence)
            fence = None
            prose.append("")
        elif fence is not None:
            fence[2].append(line)
            prose.append("")
        else:
            prose.append(line)
    return "\n".join(prose), blocks

def headings(path):
    prose, _ = split_fences(open(path, encoding="utf-8").read())
    return {anchor(m.group(1)) for m in re.finditer(r"^#{1,6} (.*)$", prose, re.M)}

# --- 1. links ------------------------------------------------------------------------------------------
for doc in docs:
    prose, _ = split_fences(open(doc, encoding="utf-8").read())
    prose = re.sub(r"`[^`]*`", "", prose)
    for m in re.finditer(r"\]\(([^)\s]+)\)", prose):
        target = m.group(1)
        if re.match(r"^[a-z]+:", target):
            continue
        path, _, frag = target.partition("#")
        full = os.path.normpath(os.path.join(os.path.dirname(doc), path)) if path else doc
        if not os.path.exists(full):
            problems.append(f"{rel(doc)}: link to {target}: no such file")
        elif frag and full.endswith(".md") and frag not in headings(full):
            problems.append(f"{rel(doc)}: link to {target}: no heading with that anchor")

# --- 2. flags ------------------------------------------------------------------------------------------
help_cache = {}

def help_text(words):
    key = tuple(words)
    if key not in help_cache:
        r = subprocess.run([cli, *words, "--help"], capture_output=True, text=True)
        help_cache[key] = r.stdout + r.stderr if r.returncode == 0 else None
    return help_cache[key]

def subcommands_of(h):
    """The names listed under "Subcommands:" in a --help text."""
    if not h or "Subcommands:" not in h:
        return set()
    listed = h.split("Subcommands:", 1)[1].split("\n\n", 1)[0]
    return set(re.findall(r"^\s{2,}([a-z][a-z-]*)\s", listed, re.M))

commands = subcommands_of(help_text([]))
if not commands:
    problems.append("blocklab --help lists no subcommands")

def code_segments(text):
    prose, blocks = split_fences(text)
    for info, _, lines in blocks:
        joined = "\n".join(lines).replace("\\\n", " ")
        for line in joined.split("\n"):
            yield line
    for m in re.finditer(r"`([^`]+)`", prose, re.S):
        yield m.group(1).replace("\n", " ")

checked = 0
for doc in docs:
    for seg in code_segments(open(doc, encoding="utf-8").read()):
        for piece in re.split(r"&&|\|\||;|\|", seg):
            m = re.search(r"(?:^|[\s/$])blocklab\s+(.*)$", piece)
            if not m:
                continue
            tokens = m.group(1).split()
            if not tokens or tokens[0].startswith("-") or tokens[0] not in commands:
                if tokens and re.fullmatch(r"[a-z]+", tokens[0]) and tokens[0] not in commands and \
                        any(t.startswith("--") for t in tokens):
                    problems.append(f"{rel(doc)}: `blocklab {tokens[0]}`: no such command")
                continue
            words = [tokens[0]]
            sub_help = help_text(words)
            if len(tokens) > 1 and tokens[1] in subcommands_of(sub_help):
                words.append(tokens[1])
            h = help_text(words)
            if h is None:
                problems.append(f"{rel(doc)}: `blocklab {' '.join(words)} --help` fails")
                continue
            known = set(re.findall(r"--[a-z0-9][a-z0-9-]*", h)) | {"--help"}
            for t in tokens[len(words):]:
                f = re.match(r"^(--[a-z0-9][a-z0-9-]*)", t)
                if not f or re.search(r"[A-Z]", t.split("=")[0]):
                    continue
                checked += 1
                if f.group(1) not in known:
                    problems.append(f"{rel(doc)}: `blocklab {' '.join(words)} {f.group(1)}`: not a flag of that command")

# --- 3. runnable blocks ------------------------------------------------------------------------------------
ran = 0
with tempfile.TemporaryDirectory(prefix="blocklab-check-docs-") as scratch:
    os.makedirs(os.path.join(scratch, "build"))
    os.symlink(cli, os.path.join(scratch, "build", "blocklab"))
    os.symlink(os.path.join(root, "tests"), os.path.join(scratch, "tests"))
    for doc in docs:
        _, blocks = split_fences(open(doc, encoding="utf-8").read())
        for info, first, lines in blocks:
            if info.split() != ["sh", "check"] or not run_blocks:
                continue
            for cmd in "\n".join(lines).replace("\\\n", " ").split("\n"):
                cmd = cmd.split(" #")[0].strip()
                if not cmd or cmd.startswith("#"):
                    continue
                ran += 1
                r = subprocess.run(["bash", "-c", cmd], cwd=scratch, capture_output=True, text=True)
                if r.returncode != 0:
                    tail = (r.stderr or r.stdout).strip().splitlines()[-1:] or [""]
                    problems.append(f"{rel(doc)}:{first}: `{cmd}` exited {r.returncode}: {tail[0]}")

for p in problems:
    print("check-docs: " + p)
print(f"check-docs: {len(docs)} files, {checked} flags checked, {ran} commands run, {len(problems)} problems")
sys.exit(1 if problems else 0)
PY
