#!/usr/bin/env bash
# Debian roots for the portable wheels (tools/build-wheel-portable.sh, tools/test-wheels.sh): a directory tree
# of one Debian release made by debootstrap from Debian's archive, kept and reused (a second call downloads
# nothing), and commands run inside it with chroot. Needs root (or sudo) and debootstrap (installed where
# missing). A root of a foreign architecture (arm64 on x86-64) is only unpacked (debootstrap --foreign, no
# second stage, which would need binfmt_misc to run its programs): its programs run through qemu-aarch64 -L DIR
# (tools/test-wheels.sh), not chroot.
#
#   tools/debian-root.sh make DIR SUITE ARCH [PACKAGE...]   make DIR (when it is not ready yet) with PACKAGEs
#   tools/debian-root.sh run DIR COMMAND...                  run COMMAND in DIR (bash -c), as root
#
# `run` mounts /proc, /dev and /dev/pts in the root, copies the host's resolv.conf and CA bundle into it (pip
# there verifies PyPI with the host's CA bundle: PIP_CERT, SSL_CERT_FILE, REQUESTS_CA_BUNDLE point at it),
# and unmounts again on every exit, failure or interrupt.
set -euo pipefail
sudo=""
[ "$(id -u)" -ne 0 ] && sudo="sudo"
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
host_ca=/etc/ssl/certs/ca-certificates.crt

make_root() {
  local dir=$1 suite=$2 arch=$3
  shift 3
  if [ -e "$dir/.blocklab-root-ready" ]; then
    return 0
  fi
  command -v debootstrap > /dev/null || { $sudo apt-get install -y -q debootstrap > /dev/null; }
  local foreign=()
  if [ "$arch" != "$(dpkg --print-architecture)" ]; then
    foreign=(--foreign)
  fi
  mkdir -p "$(dirname "$dir")"
  # never delete through a mount left behind (a bound /dev)
  if [ -e "$dir" ] && awk '{print $2}' /proc/mounts | grep -q "^$(realpath "$dir")/"; then
    echo "debian-root: something is still mounted under $dir; unmount it first" >&2
    exit 1
  fi
  rm -rf "$dir"
  local packages
  packages=$(IFS=,; echo "ca-certificates,$*")
  echo "debian-root: debootstrap $suite ($arch) into $dir with ${packages}"
  local log
  log="$(dirname "$dir")/debootstrap-$(basename "$dir").log"
  if ! $sudo debootstrap --variant=minbase --arch="$arch" "${foreign[@]}" --include="$packages" "$suite" "$dir" \
      "$mirror" > "$log" 2>&1; then
    tail -n 20 "$log"
    echo "debian-root: debootstrap failed (log: $log)" >&2
    exit 1
  fi
  if [ ${#foreign[@]} -gt 0 ]; then
    # the first stage unpacks only the essential packages: the others (PACKAGEs and what they need) are
    # unpacked from debootstrap's download cache too, unconfigured
    local deb
    for deb in "$dir"/var/cache/apt/archives/*.deb; do
      $sudo dpkg-deb -x "$deb" "$dir"
    done
  fi
  $sudo touch "$dir/.blocklab-root-ready"
}

run_in_root() {
  local dir=$1
  shift
  [ -e "$dir/.blocklab-root-ready" ] || { echo "debian-root: $dir is not a ready root" >&2; exit 2; }
  mounted=()
  cleanup() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do
      $sudo umount -l "${mounted[$i]}" 2> /dev/null || true
    done
  }
  trap cleanup EXIT INT TERM
  for m in proc dev dev/pts; do
    mkdir -p "$dir/$m"
    if ! mountpoint -q "$dir/$m"; then
      case $m in
        proc) $sudo mount -t proc proc "$dir/proc" ;;
        dev) $sudo mount --bind /dev "$dir/dev" ;;
        dev/pts) $sudo mount --bind /dev/pts "$dir/dev/pts" ;;
      esac
      mounted+=("$dir/$m")
    fi
  done
  $sudo cp /etc/resolv.conf "$dir/etc/resolv.conf" 2> /dev/null || true
  $sudo cp "$host_ca" "$dir/etc/blocklab-host-ca.crt"
  $sudo chroot "$dir" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
    PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    PIP_CERT=/etc/blocklab-host-ca.crt SSL_CERT_FILE=/etc/blocklab-host-ca.crt \
    REQUESTS_CA_BUNDLE=/etc/blocklab-host-ca.crt PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_DEFAULT_TIMEOUT=60 \
    DEBIAN_FRONTEND=noninteractive JOBS="${JOBS:-2}" \
    /bin/bash -c "$*"
}

case "${1:-}" in
  make) shift; make_root "$@" ;;
  run) shift; run_in_root "$@" ;;
  *) echo "usage: $0 make DIR SUITE ARCH [PACKAGE...] | run DIR COMMAND..." >&2; exit 2 ;;
esac
