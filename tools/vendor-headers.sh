#!/usr/bin/env bash
# The header-only libraries the build needs (nlohmann/json, CLI11, xxHash), copied from this machine's Debian
# packages into DEST (default third_party/, ignored by git) with their Debian copyright files, so that an sdist
# made afterwards builds where they are not installed (CMakeLists.txt takes them from third_party/ only where
# CMake does not find them on the system).
#
#   tools/vendor-headers.sh [DEST]
#
# Run by `make sdist` and `make wheel-portable` before the sdist is made.
set -euo pipefail
cd "$(dirname "$0")/.."
dest=${1:-third_party}
packages=(nlohmann-json3-dev libcli11-dev libxxhash-dev)
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2> /dev/null | grep -q 'install ok installed'; then
    echo "vendor-headers: $p is not installed (apt-get install ${packages[*]})" >&2
    exit 1
  fi
done
rm -rf "$dest"
mkdir -p "$dest/include" "$dest/licenses"
cp -r /usr/include/nlohmann /usr/include/CLI "$dest/include/"
cp /usr/include/xxhash.h "$dest/include/"
{
  echo "Header-only libraries compiled into blocklab where the system has none (tools/vendor-headers.sh):"
  for p in "${packages[@]}"; do
    cp "/usr/share/doc/$p/copyright" "$dest/licenses/$p.copyright"
    echo "  $(dpkg-query -W -f='${Package} ${Version}' "$p") (Debian), licence in licenses/$p.copyright"
  done
} > "$dest/README"
echo "vendor-headers: $(du -sh "$dest" | cut -f1) in $dest"
