#!/usr/bin/env bash
# check-release.sh is `make check-release`: `goreleaser check` on
# .goreleaser.yaml, a snapshot build into dist/ (`goreleaser release
# --snapshot --clean --skip=publish`: nothing is published), and a check of
# what it made: an archive for each of linux and darwin on amd64 and arm64,
# holding a static hookgate binary of that platform; checksums.txt that
# verifies; an SPDX SBOM of each archive that lists hookgate's modules.
# GORELEASER is the command that runs GoReleaser (the Makefile's: go run
# at GORELEASER_VERSION).
set -euo pipefail
cd "$(dirname "$0")/.."

die() { echo "check-release: $*" >&2; exit 1; }

read -r -a goreleaser <<<"${GORELEASER:?set GORELEASER (make check-release does)}"
"${goreleaser[@]}" check
"${goreleaser[@]}" release --snapshot --clean --skip=publish

(cd dist && sha256sum --quiet -c checksums.txt) || die "dist/checksums.txt does not verify"
version=$(sed -n 's/.*"version":"\([^"]*\)".*/\1/p' dist/metadata.json)
[[ -n $version ]] || die "no version in dist/metadata.json"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for os in linux darwin; do
	for arch in amd64 arm64; do
		archive=hookgate_${version}_${os}_${arch}.tar.gz
		[[ -s dist/$archive ]] || die "no dist/$archive"
		grep -q " $archive\$" dist/checksums.txt || die "checksums.txt has no line for $archive"
		mkdir -p "$tmp/$os-$arch"
		tar -xzf "dist/$archive" -C "$tmp/$os-$arch"
		for f in hookgate README.md hookgate.example.yaml docs/deployment.md; do
			[[ -s $tmp/$os-$arch/$f ]] || die "$archive has no $f"
		done
		info=$(go version -m "$tmp/$os-$arch/hookgate")
		for want in "GOOS=$os" "GOARCH=$arch" "CGO_ENABLED=0"; do
			grep -q "build[[:space:]]*$want\$" <<<"$info" || die "$archive: the binary was not built with $want"
		done
		sbom=dist/$archive.sbom.json
		[[ -s $sbom ]] || die "no SBOM $sbom"
		grep -q '"spdxVersion": *"SPDX-2' "$sbom" || die "$sbom is not SPDX JSON"
		grep -q '"name": *"github.com/jackc/pgx/v5"' "$sbom" || die "$sbom does not list github.com/jackc/pgx/v5"
		grep -q " $archive.sbom.json\$" dist/checksums.txt || die "checksums.txt has no line for $archive.sbom.json"
		echo "check-release: $archive: hookgate for $os/$arch, its SBOM and checksums"
	done
done
if [[ $(go env GOOS)/$(go env GOARCH) == linux/amd64 ]]; then
	got=$("$tmp/linux-amd64/hookgate" version)
	[[ $got == "hookgate $version" ]] || die "the linux/amd64 binary says \"$got\", want \"hookgate $version\""
	echo "check-release: $got"
fi
