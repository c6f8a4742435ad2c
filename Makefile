SHELL := bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := build

# Packages `make test` runs, and extra flags for go test, e.g.
#   make test PKGS=./internal/dedup/... GOTESTFLAGS='-run TestReplay -v'
#   make test PKGS=./internal/dedup/ GOTESTFLAGS='-run "^(TestReplay|TestRun)$"' (quotes and $ pass through,
#   single or double: GOTESTFLAGS="-run 'A|B'" works too)
PKGS ?= ./...
GOTESTFLAGS ?=
# The test recipes pass GOTESTFLAGS in the environment, as it was written:
# not expanded by make (a $ stays), and not inside the recipe's own quotes
# (a ' inside it stays).
test test-citus test-image: export override GOTESTFLAGS := $(value GOTESTFLAGS)
# The fast tier's go test flags and race flag (docs/tests.md#the-fast-tier):
#   make test-fast FAST_RACE=-race   keeps the race detector in the fast tier
FAST_FLAGS ?= -short -vet=off
test-fast: export override GOTESTFLAGS := $(FAST_FLAGS) $(value GOTESTFLAGS)
FAST_RACE ?=
# Both tiers keep their linked test binaries between runs in the directory
# HOOKGATE_TEST_CACHE names (default: hookgate-test beside Go's build cache;
# HOOKGATE_TEST_CACHE= make test turns that off): docs/tests.md#the-fast-tier
# Arguments for the load benchmark, e.g. make bench BENCHFLAGS='-duration 30s'
BENCHFLAGS ?=
# Arguments of make redeliver (hookgate redeliver)
ARGS ?=

# golangci-lint, built by the Go toolchain from the module proxy at this
# version (go run caches the binary).
GOLANGCI_LINT_VERSION ?= v2.15.0
GOLANGCI_LINT ?= go run github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

GO_FILES = find . \( -path ./.git -o -path ./.data -o -path ./bin \) -prune -o -name '*.go' -print

# The container image (make image, make test-image; docs/deployment.md):
# IMAGE:VERSION and IMAGE:latest, built with CONTAINER_ENGINE (podman, or
# docker when a Docker engine answers) for GOARCH (default: the host's).
IMAGE ?= hookgate
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)

# Helm and GoReleaser, built by the Go toolchain from the module proxy at
# these versions (go run caches the binaries), kept out of go.mod: both
# bring hundreds of modules (Kubernetes' client, cloud SDKs).
HELM_VERSION ?= v4.3.2
HELM ?= go run helm.sh/helm/v4/cmd/helm@$(HELM_VERSION)
GORELEASER_VERSION ?= v2.17.0
GORELEASER ?= go run github.com/goreleaser/goreleaser/v2@$(GORELEASER_VERSION)
CHART = deploy/helm/hookgate

.PHONY: help recovery citus-crash image test-image check-chart check-compose check-release check-docs check-providers check-walkthrough redeliver run test test-fast test-citus bench bench-citus bench-console screenshots generate check-generated build lint check-alerts db-stop clean-data

## help: list the targets, each with its one-line description
help:
	@awk '/^## [a-z-]+:/ { sub(/^## /, ""); n = index($$0, ":"); printf "  %-18s %s\n", substr($$0, 1, n - 1), substr($$0, n + 2) }' $(MAKEFILE_LIST)

## run: start the local PostgreSQL in .data/pg and serve on 127.0.0.1:8080
##   HOOKGATE_ADDR=:8080 make run listens on every interface.
run:
	@.ci/run-local.sh

## redeliver: run `hookgate redeliver $(ARGS)` against the database of make run
##   For example:
##   make redeliver ARGS='--sender orders --target sink --state failed --since 2h'
##   It builds .data/hookgate and checks the configuration first: an unset ${VAR} is named before anything else.
redeliver:
	@mkdir -p .data && go build -o .data/hookgate ./cmd/server
	@.data/hookgate config check --config "$${HOOKGATE_CONFIG:-hookgate.yaml}" >/dev/null || { echo "make redeliver: $${HOOKGATE_CONFIG:-hookgate.yaml} cannot be loaded (see above): nothing was redelivered" >&2; exit 1; }
	@[[ -s .data/database-url ]] || { echo "make redeliver: run make run first (it starts the database)" >&2; exit 1; }
	@DATABASE_URL="$$(<.data/database-url)" HOOKGATE_CONFIG="$${HOOKGATE_CONFIG:-hookgate.yaml}" .data/hookgate redeliver $(ARGS)

## check-providers: sign deliveries with the providers' own Node libraries and check hookgate's answers
##   Needs node and npm; the libraries are pinned. Not part of .ci/run.
check-providers:
	@.ci/check-providers.sh

## test: run all tests against a throwaway PostgreSQL
test:
	@PKGS='$(PKGS)' .ci/test.sh

## test-fast: the fast tier: go test -short without -race against a throwaway PostgreSQL
##   (FAST_RACE=-race keeps -race). It leaves out the process-kill, outage, load and browser suites;
##   testkit.Slow skips them under -short and says why. make test runs everything with -race.
test-fast:
	@PKGS='$(PKGS)' TEST_RACE='$(FAST_RACE)' .ci/test.sh

## test-citus: run the tests of dedup, store, handler and forward on a running Citus cluster
##   make test-citus CITUS_URL=postgres://postgres@127.0.0.1:9700/postgres (see docs/distributed.md)
##   CITUS_SERVER_TESTS: cmd/server's tests of real gateway processes run there too ('' for none)
CITUS_PKGS ?= ./internal/dedup/... ./internal/events/... ./internal/store/... ./internal/queue/... ./internal/handler/... ./internal/forward/... ./internal/retention/... ./internal/sigtoken/... ./internal/console/...
CITUS_SERVER_TESTS ?= TestCopiesThroughTwoProcesses|TestQueryExecModeInURL
test-citus:
	@CITUS_URL='$(CITUS_URL)' PKGS='$(CITUS_PKGS)' SERVER_TESTS='$(CITUS_SERVER_TESTS)' .ci/test-citus.sh

## bench: run the load benchmark against a throwaway PostgreSQL (fsync on)
bench:
	@.ci/bench.sh $(BENCHFLAGS)

## recovery: kill the gateway and PostgreSQL mid-load and print how long forwarding took to recover
##   The crash tests of cmd/server assert every event arrives, none twice; the times are figures, not bounds.
recovery:
	@.ci/recovery.sh

## bench-citus: first deliveries/s on a running Citus cluster against a throwaway PostgreSQL
##   It alternates ROUNDS runs of each (default 3) and prints each run, the means and the ratio:
##   make bench-citus CITUS_URL=postgres://postgres@127.0.0.1:9700/postgres (see docs/distributed.md#figures)
bench-citus:
	@CITUS_URL='$(CITUS_URL)' ROUNDS='$(ROUNDS)' .ci/bench-citus.sh $(BENCHFLAGS)

## citus-crash: kill and restart a running Citus coordinator while a gateway forwards a burst
##   Every accepted delivery's forward must reach the sink: make citus-crash CITUS_URL=… CITUS_COORD_DATA=/tmp/citus/n9700
citus-crash:
	@CITUS_URL='$(CITUS_URL)' CITUS_COORD_DATA='$(CITUS_COORD_DATA)' .ci/citus-crash.sh

## bench-console: time the console's delivery list queries on 1,000,000 deliveries of one sender (throwaway PostgreSQL)
bench-console:
	@.ci/bench-console.sh

## screenshots: run the console's browser tests and rewrite the screenshots in docs/ that changed
##   A page counts as changed when more than 1% of its pixels differ. The tests write fixed times and IDs
##   and run the server on a fixed clock, so the charts' axes match from run to run (docs/tests.md).
screenshots:
	@mkdir -p docs
	@PKGS=./internal/console/ GOTESTFLAGS='-run ^(TestConsoleInBrowser|TestConsoleBreakerHistoryInBrowser)$$ -v' HOOKGATE_SCREENSHOTS_DIR='$(CURDIR)/docs' .ci/test.sh

## generate: regenerate api/ from openapi.yaml
generate:
	go generate ./api/...

## check-generated: fail when the committed api/ code is not what generate produces
check-generated: generate
	@if ! git diff --quiet -- api/ || [[ -n "$$(git ls-files --others --exclude-standard -- api/)" ]]; then \
		git status --short -- api/; git diff --stat -- api/; \
		echo "check-generated: api/ is stale: run 'make generate' and commit the result" >&2; exit 1; \
	fi

## image: build the container image $(IMAGE):$(VERSION) and :latest from a static binary
image:
	@IMAGE='$(IMAGE)' VERSION='$(VERSION)' .ci/image.sh

## test-image: build the image and run it with podman against a throwaway PostgreSQL
##   It checks: non-root, read-only root, migrate, /readyz, a delivery, its replay, a forward to the host, SIGTERM.
test-image:
	@IMAGE='$(IMAGE)' VERSION='$(VERSION)' .ci/test-image.sh

## check-chart: helm lint --strict and helm template with each values file of deploy/helm/hookgate/ci/
##   TestChart then checks the rendered manifests name the image, probes and secrets as docs/deployment.md says.
check-chart:
	@for f in $(CHART)/ci/*.yaml; do \
		echo "helm lint --strict $(CHART) -f $$f"; \
		$(HELM) lint --strict $(CHART) -f "$$f" 2>&1 | grep -v 'found symbolic link in path'; \
	done
	HOOKGATE_HELM='$(HELM)' go test -count=1 -run '^TestChart' -v ./internal/testing/deploytest/

## check-compose: parse deploy/compose.yaml (TestComposeFile); it is never run here (no registry to pull postgres from)
check-compose:
	go test -count=1 -run '^TestComposeFile' -v ./internal/testing/deploytest/

## check-release: goreleaser check and a snapshot build into dist/, nothing published
##   Linux and macOS archives for amd64 and arm64, checksums and SBOMs, then a check of what it made.
check-release:
	@GORELEASER='$(GORELEASER)' .ci/check-release.sh

## build: build the server into bin/hookgate
build:
	go build -o bin/hookgate ./cmd/server

## lint: gofmt, go vet and golangci-lint (.golangci.yaml)
lint:
	@unformatted=$$($(GO_FILES) | xargs -r gofmt -l); \
	if [[ -n "$$unformatted" ]]; then echo "gofmt needed on:" >&2; echo "$$unformatted" >&2; exit 1; fi
	go vet ./...
	$(GOLANGCI_LINT) run ./...

## check-alerts: check deploy/prometheus/alerts.yaml with promtool (Debian package prometheus), and run its cases
check-alerts:
	@if ! command -v promtool >/dev/null; then \
		echo "check-alerts: SKIPPED: promtool is not installed (Debian package prometheus; .ci/run installs it as root), so deploy/prometheus/alerts.yaml was not checked" >&2; \
	else \
		promtool check rules deploy/prometheus/alerts.yaml && \
		promtool test rules deploy/prometheus/alerts_test.yaml; \
	fi

## check-docs: fail on a relative link or #anchor in a Markdown file that does not resolve
check-docs:
	go test -count=1 -run 'TestRelativeLinksResolve|TestLinkCheckCatchesBrokenLinks' ./internal/testing/doccheck/

## check-walkthrough: run the README's curl walk-through as printed, and its example service behind hookgate
##   It fails when an answer differs from the README. It uses a throwaway PostgreSQL.
check-walkthrough:
	@PKGS=./internal/testing/doccheck/ GOTESTFLAGS='-run ^(TestReadmeWalkthrough|TestReadmeService)$$ -v' .ci/test.sh

## db-stop: stop the local PostgreSQL `make run` started
db-stop:
	@.ci/pg.sh stop .data/pg

## clean-data: stop the local PostgreSQL and delete .data (database, token, binary)
clean-data:
	@.ci/pg.sh destroy .data/pg
	rm -rf .data
