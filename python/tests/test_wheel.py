"""The wheel of `make wheel` (tools/build-wheel.sh) installed into a new virtual environment in a temporary
directory outside the source tree: `import blocklab` trains there, the `blocklab` command runs there, and the
module and the CLI load the shared libraries bundled in the wheel, not the system's."""
import glob
import os
import subprocess
import sys

import pytest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def the_wheel():
    wheelhouse = os.environ.get("BLOCKLAB_WHEELHOUSE", os.path.join(ROOT, "build", "wheelhouse"))
    wheels = sorted(glob.glob(os.path.join(wheelhouse, "blocklab-*.whl")))
    if not wheels:
        pytest.skip(f"no wheel in {wheelhouse} (make wheel builds it)")
    return wheels[-1]


@pytest.fixture(scope="module")
def venv(tmp_path_factory):
    wheel = the_wheel()
    home = tmp_path_factory.mktemp("wheel-venv")
    assert not str(home).startswith(ROOT)
    subprocess.run([sys.executable, "-m", "venv", str(home / "venv")], check=True)
    python = str(home / "venv" / "bin" / "python")
    # numpy (the one dependency) comes from PyPI
    installed = subprocess.run([python, "-m", "pip", "--disable-pip-version-check", "-q", "install", "--timeout", "20",
                                "--retries", "2", wheel], capture_output=True, text=True)
    if installed.returncode != 0:
        print(installed.stdout[-2000:], installed.stderr[-2000:])
        pytest.skip("could not install the wheel's dependencies from PyPI into a new virtual environment (see above)")
    return home


def run(venv, *args):
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "BLOCKLAB", "VIRTUAL_ENV"))}
    env["PATH"] = str(venv / "venv" / "bin") + os.pathsep + "/usr/bin:/bin"
    return subprocess.run(list(map(str, args)), cwd=venv, env=env, capture_output=True, text=True, timeout=300)


def test_wheel_is_tagged_manylinux_and_bundles_its_libraries():
    import zipfile

    wheel = the_wheel()
    assert "manylinux" in os.path.basename(wheel)
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
    assert "blocklab/bin/blocklab" in names and any(n.startswith("blocklab/_core") for n in names)
    bundled = [os.path.basename(n) for n in names if n.startswith("blocklab.libs/")]
    assert any(n.startswith("libopenblas") for n in bundled), bundled
    assert any(n.startswith("libxxhash") for n in bundled), bundled


def test_wheel_trains_in_a_new_virtual_environment(venv):
    script = (
        "import os, blocklab\n"
        "print(blocklab.__file__)\n"
        "run = blocklab.train(layers=2, width=16, heads=2, vocab=8, copy_len=4, batch=8, steps=60, lr=3e-3,\n"
        "                     threads=1, out='py-run', progress=False)\n"
        "loss = run.metrics['loss']\n"
        "print(len(loss), loss[:5].mean(), loss[-5:].mean())\n"
        "print(sorted(f for f in os.listdir('py-run') if 'tfevents' in f))\n")
    result = run(venv, venv / "venv" / "bin" / "python", "-c", script)
    assert result.returncode == 0, result.stderr
    where, losses, events = result.stdout.splitlines()[-3:]
    assert where.startswith(str(venv / "venv")) and not where.startswith(ROOT)
    steps, first, last = losses.split()
    assert int(steps) == 60 and float(last) < float(first)
    assert "events.out.tfevents." in events

    # the blocklab command of the package, on the virtual environment's PATH
    result = run(venv, "blocklab", "train", "--layers", "1", "--width", "16", "--heads", "2", "--vocab", "8",
                 "--copy-len", "4", "--batch", "4", "--steps", "5", "--threads", "1", "--out", "cli-run")
    assert result.returncode == 0, result.stderr
    assert "done: 5 steps" in result.stdout
    assert os.path.exists(venv / "cli-run" / "metrics.csv")
    assert run(venv, "blocklab", "--help").returncode == 0


# What manylinux lets a wheel take from the system (auditwheel's policy); everything else must be bundled.
SYSTEM = ("linux-vdso", "ld-linux", "/lib64/ld-linux", "/lib/ld-linux", "libc.so", "libm.so", "libstdc++", "libgcc_s", "libpthread", "libdl.so", "librt.so",
          "libz.so")


def test_installed_module_and_cli_load_the_bundled_libraries(venv):
    import re

    site = glob.glob(str(venv / "venv" / "lib" / "python*" / "site-packages"))[0]
    module = glob.glob(os.path.join(site, "blocklab", "_core*.so"))[0]
    libs_dir = os.path.join(site, "blocklab.libs")
    for binary in [module, os.path.join(site, "blocklab", "bin", "blocklab")]:
        ldd = run(venv, "ldd", binary)
        assert ldd.returncode == 0 and "not found" not in ldd.stdout, ldd.stdout
        bundled = []
        for line in ldd.stdout.splitlines():
            name = line.split()[0]
            if name.startswith(SYSTEM):
                continue
            m = re.search(r"=> (/\S+)", line)
            assert m and os.path.dirname(os.path.normpath(m.group(1))) == libs_dir, line
            bundled.append(name)
        assert any(n.startswith("libopenblas") for n in bundled) and any(n.startswith("libgomp") for n in bundled)
