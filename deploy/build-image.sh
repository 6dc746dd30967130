#!/bin/sh
# Builds the troupe node image FROM scratch without network access: the
# binaries (troupe, and troupe-ml, the model tools troupe runs) are built
# on the host, the shared libraries they link (per ldd) are copied beside
# them, and docker builds from that context.
#
#   deploy/build-image.sh            # tags troupe:dev
#   TROUPE_IMAGE=troupe:1 deploy/build-image.sh
#   TROUPE_BINARY=/path/troupe deploy/build-image.sh   # use a binary built already
#
# With TROUPE_BINARY, troupe-ml is TROUPE_ML_BINARY, else the troupe-ml
# beside TROUPE_BINARY, else built here.
#
# Why dynamic: go-nvml (cgo) dlopens libnvidia-ml.so.1 at run time; a static
# glibc binary cannot dlopen a library built against the shared glibc, so a
# static build would never see a real GPU. The netgo and osusergo tags keep
# name resolution and user lookup in Go, so no NSS modules are dlopened.
set -eu
cd "$(dirname "$0")/.."
image=${TROUPE_IMAGE:-troupe:dev}
ctx=$(mktemp -d)
trap 'rm -rf "$ctx"' EXIT

if [ -n "${TROUPE_BINARY:-}" ]; then
	cp "$TROUPE_BINARY" "$ctx/troupe"
	ml=${TROUPE_ML_BINARY:-$(dirname "$TROUPE_BINARY")/troupe-ml}
	if [ -f "$ml" ]; then
		cp "$ml" "$ctx/troupe-ml"
	else
		CGO_ENABLED=1 go build -trimpath -tags netgo,osusergo -o "$ctx/troupe-ml" ./cmd/troupe-ml
	fi
else
	version=${TROUPE_VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo devel)}
	revision=$(git rev-parse HEAD 2>/dev/null || true)
	CGO_ENABLED=1 go build -trimpath -tags netgo,osusergo -ldflags "-X main.version=$version -X main.revision=$revision" -o "$ctx/troupe" ./cmd/troupe
	CGO_ENABLED=1 go build -trimpath -tags netgo,osusergo -o "$ctx/troupe-ml" ./cmd/troupe-ml
fi

mkdir -p "$ctx/rootfs"
# ldd lines: "libc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x...)" and
# "/lib64/ld-linux-x86-64.so.2 (0x...)"; linux-vdso has no file. A static
# troupe-ml lists none.
lddlibs() { ldd "$1" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }'; }
if [ -z "$(lddlibs "$ctx/troupe")" ]; then
	echo "build-image: ldd lists no libraries: is the binary static?" >&2
	exit 1
fi
libs=$({ lddlibs "$ctx/troupe"; lddlibs "$ctx/troupe-ml"; } | sort -u)
for lib in $libs; do
	mkdir -p "$ctx/rootfs$(dirname "$lib")"
	cp -L "$lib" "$ctx/rootfs$lib" # -L: the file, not the symlink
	echo "build-image: + $lib"
done
cp deploy/Dockerfile "$ctx/Dockerfile"
docker build -q -t "$image" "$ctx"
echo "build-image: built $image ($(docker image inspect -f '{{.Size}}' "$image") bytes)"
