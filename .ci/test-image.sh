#!/usr/bin/env bash
# test-image.sh is `make test-image`: it builds the image (.ci/image.sh, the
# binary built on the host) and runs internal/testing/deploytest's TestImage against
# a throwaway PostgreSQL (.ci/test.sh): the image started by podman (or
# docker) as non-root on a read-only root file system, migrate, /readyz, a
# delivery and its replay, a forward to a target on the host, SIGTERM.
# Every container the test creates carries a label of this run; whatever a
# killed test left is removed at the end.
#
# With podman, CONTAINERS_CONF defaults to deploy/podman/containers.conf
# (runc, cgroupfs, no default ulimits: what the development machines
# need); set it to use another.
set -euo pipefail
cd "$(dirname "$0")/.."

.ci/image.sh
engine=$(<.build/image.engine)
if [[ $engine == podman && -z ${CONTAINERS_CONF+set} ]]; then
	export CONTAINERS_CONF=$PWD/deploy/podman/containers.conf
fi
label=io.hookgate.test-run=$$-$RANDOM
cleanup() {
	local rc=$? ids
	ids=$("$engine" ps -a -q --filter "label=$label" 2>/dev/null || true)
	if [[ -n $ids ]]; then
		# shellcheck disable=SC2086 # one ID a word
		"$engine" rm -f $ids >/dev/null 2>&1 || true
	fi
	exit "$rc"
}
trap cleanup EXIT
HOOKGATE_TEST_IMAGE=$(<.build/image.id) HOOKGATE_TEST_ENGINE=$engine HOOKGATE_TEST_CONTAINER_LABEL=$label \
	PKGS=./internal/testing/deploytest/ GOTESTFLAGS="-run ^TestImage\$ -v ${GOTESTFLAGS:-}" .ci/test.sh
