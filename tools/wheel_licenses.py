"""Adds the Debian copyright file of every shared library that `auditwheel repair` bundled into a wheel
(blocklab.libs/) to the wheel's .dist-info/licenses/bundled/<package>.copyright, and updates RECORD.

With --compiled-in DIR (an sdist's third_party/licenses: the header-only libraries compiled into the binaries
where the build machine had none), each file in DIR goes to .dist-info/licenses/compiled-in/ as well.

usage: wheel_licenses.py [--compiled-in DIR] WHEEL BINARY...   (BINARY: the module and the CLI before repair,
whose `ldd` paths name the system libraries that the bundled copies came from)"""
import base64
import hashlib
import os
import re
import subprocess
import sys
import zipfile


def system_libraries(binaries):
    """{basename of the real file: its path} of every library the binaries load."""
    libs = {}
    for binary in binaries:
        out = subprocess.run(["ldd", binary], capture_output=True, text=True, check=True).stdout
        for m in re.finditer(r"=> (/\S+)", out):
            real = os.path.realpath(m.group(1))
            libs[os.path.basename(real)] = real
    return libs


def debian_package(path):
    out = subprocess.run(["dpkg", "-S", path], capture_output=True, text=True)
    if out.returncode != 0:  # dpkg knows the path through /lib (merged /usr) or the other way round
        alt = path.replace("/usr/lib/", "/lib/", 1) if path.startswith("/usr/lib/") else "/usr" + path
        out = subprocess.run(["dpkg", "-S", alt], capture_output=True, text=True)
    if out.returncode != 0:
        return None
    return out.stdout.split(":", 1)[0].strip()


def record_line(name, data):
    digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
    return f"{name},sha256={digest},{len(data)}"


def main(wheel, binaries, compiled_in=None):
    libs = system_libraries(binaries)
    with zipfile.ZipFile(wheel) as z:
        entries = [(info, z.read(info)) for info in z.infolist()]
    dist_info = next(i.filename.split("/")[0] for i, _ in entries if i.filename.endswith(".dist-info/RECORD"))
    added = {}
    for info, _ in entries:
        if not info.filename.startswith("blocklab.libs/") or info.filename.endswith("/"):
            continue
        bundled = info.filename.split("/", 1)[1]
        original = re.sub(r"-[0-9a-f]{8}(?=\.)", "", bundled, count=1)  # auditwheel's hash out of the name
        path = libs.get(original)
        package = debian_package(path) if path else None
        copyright_file = f"/usr/share/doc/{package}/copyright" if package else None
        if copyright_file is None or not os.path.exists(copyright_file):
            sys.exit(f"wheel_licenses.py: no Debian copyright file for the bundled {bundled} ({path})")
        with open(copyright_file, "rb") as f:
            added[f"{dist_info}/licenses/bundled/{package}.copyright"] = f.read()
    if compiled_in:
        for name in sorted(os.listdir(compiled_in)):
            with open(os.path.join(compiled_in, name), "rb") as f:
                added[f"{dist_info}/licenses/compiled-in/{name}"] = f.read()
    tmp = wheel + ".tmp"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as z:
        record = None
        for info, data in entries:
            if info.filename == f"{dist_info}/RECORD":
                record = data.decode()
                continue
            z.writestr(info, data)
        lines = [line for line in record.splitlines() if line and not line.startswith(f"{dist_info}/RECORD,")]
        for name, data in sorted(added.items()):
            z.writestr(name, data)
            lines.append(record_line(name, data))
        lines.append(f"{dist_info}/RECORD,,")
        z.writestr(f"{dist_info}/RECORD", "\n".join(lines) + "\n")
    os.replace(tmp, wheel)
    print(f"licences of the bundled and compiled-in libraries: {', '.join(sorted(os.path.basename(n) for n in added))}")


if __name__ == "__main__":
    args = sys.argv[1:]
    compiled_in = None
    if args[:1] == ["--compiled-in"]:
        compiled_in, args = args[1], args[2:]
    main(args[0], args[1:], compiled_in)
