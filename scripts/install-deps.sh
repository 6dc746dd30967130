#!/usr/bin/env bash
# Installs what troupe's build and tests need on a fresh Debian 12 machine
# (run as root). Both the README and .ci/run call this script, so the two
# cannot drift apart. Safe to run again: it only installs what is missing.
set -euo pipefail

# Debian packages:
#   libnvrtc11.2  NVRTC, compiles the CUDA kernels to PTX (no GPU needed);
#                 lives in the non-free component.
#   chromium      headless browser for the dashboard's end-to-end test.
#   g++           builds the CPU emulation of the CUDA kernels (tests) and
#                 the cgo part of go-nvml.
packages=(libnvrtc11.2 chromium g++)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$p")
done

if [ ${#missing[@]} -gt 0 ]; then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  # Enable contrib and non-free (NVRTC) in the deb822 or the classic sources.
  if [ -f /etc/apt/sources.list.d/debian.sources ]; then
    sed -i -E '/^Components:/{/non-free( |$)/!s/$/ contrib non-free/}' /etc/apt/sources.list.d/debian.sources
  fi
  if [ -f /etc/apt/sources.list ]; then
    sed -i -E '/^deb .*debian/{/non-free( |$)/!s/$/ contrib non-free/}' /etc/apt/sources.list
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "install-deps: installed ${missing[*]}"
fi

# Go modules (go.sum pins them).
go mod download

# go-nvml's cgo code calls NVML functions that newer headers mark
# deprecated, so compiling it the first time prints about 30 warnings
# before anything else. Add -Wno-deprecated-declarations to CGO_CFLAGS in
# the Go environment of the user running this (through sudo: that user,
# not root), keeping what is there; `go env -u CGO_CFLAGS` undoes it.
want=-Wno-deprecated-declarations
goenv() {
  if [ -n "${SUDO_USER:-}" ] && [ "$SUDO_USER" != root ] && command -v sudo >/dev/null; then
    sudo -u "$SUDO_USER" -H env "PATH=$PATH" go env "$@"
  else
    go env "$@"
  fi
}
cur=$(goenv CGO_CFLAGS)
case " $cur " in
  *" $want "*) ;;
  *)
    goenv -w "CGO_CFLAGS=${cur:+$cur }$want"
    echo "install-deps: go env -w CGO_CFLAGS=\"${cur:+$cur }$want\" (quiets go-nvml's cgo warnings; go env -u CGO_CFLAGS undoes it)"
    ;;
esac
