#!/usr/bin/env bash
# image.sh is `make image`: it builds the static hookgate binary on the host
# (CGO_ENABLED=0, linux/GOARCH), stages it with the host's CA bundle in
# .build/image/ and builds the Containerfile there (FROM scratch: no
# registry is needed), tagged $IMAGE:$VERSION and $IMAGE:latest. It writes
# the image's ID to .build/image.id and the engine it used to
# .build/image.engine (make test-image reads both).
#
#   IMAGE             the image's name (default hookgate)
#   VERSION           its tag and the binary's version (default: git describe)
#   GOARCH            the image's architecture (default: the host's)
#   CONTAINER_ENGINE  podman or docker (default: docker when a Docker engine
#                     answers, else podman)
#   CA_BUNDLE         the CA bundle to copy (default
#                     /etc/ssl/certs/ca-certificates.crt, Debian package
#                     ca-certificates)
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "image: $*" >&2; exit 1; }

image=${IMAGE:-hookgate}
version=${VERSION:-$(git describe --tags --always --dirty 2>/dev/null || echo dev)}
arch=${GOARCH:-$(go env GOARCH)}
ca=${CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

engine=${CONTAINER_ENGINE:-}
if [[ -z $engine ]]; then
	if command -v docker >/dev/null && docker info >/dev/null 2>&1; then
		engine=docker
	elif command -v podman >/dev/null; then
		engine=podman
	else
		die "neither podman nor a running Docker engine found: install Debian's podman (apt-get install podman runc)"
	fi
fi
[[ -s $ca ]] || die "no CA bundle at $ca: install Debian's ca-certificates (apt-get install ca-certificates), or set CA_BUNDLE"

ctx=.build/image
rm -rf "$ctx"
mkdir -p "$ctx"
echo "image: building hookgate $version for linux/$arch"
CGO_ENABLED=0 GOOS=linux GOARCH=$arch go build -trimpath -ldflags "-s -w -X main.version=$version" -o "$ctx/hookgate" ./cmd/server
cp "$ca" "$ctx/ca-certificates.crt"

platform=()
[[ $arch == "$(go env GOHOSTARCH)" ]] || platform=(--platform "linux/$arch")
rm -f .build/image.id
"$engine" build "${platform[@]}" -f Containerfile --build-arg VERSION="$version" \
	--iidfile .build/image.id -t "$image:$version" -t "$image:latest" "$ctx"
echo "$engine" >.build/image.engine
echo "image: built $image:$version ($image:latest), ID $(<.build/image.id), with $engine"
