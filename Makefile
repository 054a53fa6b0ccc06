# notification-worker: every command a developer or CI needs.
# `make run` needs nothing but Go; `make test` also sets up what the
# integration suite needs (redis-server, a Docker engine, local images).

GO      ?= go
# The Go toolchain every target builds, tests and lints with, the one
# go.mod asks for (encoding/json/v2 is part of its standard library). Set
# here, it outranks a GOTOOLCHAIN=local in Go's env file, so a machine
# whose local Go is older fetches go1.27.3 through the module proxy
# instead of refusing to build. `make GOTOOLCHAIN=... target` overrides it.
export GOTOOLCHAIN := go1.27.3
BIN     := bin/notification-worker
PKGS    := ./...
# The worker's version, linked in by `make build` and `make image`: the
# start-up line and notification_worker_build_info show it.
VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
export VERSION

# testcontainers-go on this kind of machine: no reaper image can be pulled,
# and without the override it mistakes the host for a container.
export TESTCONTAINERS_RYUK_DISABLED := true
export TESTCONTAINERS_HOST_OVERRIDE := 127.0.0.1

.PHONY: build run test test-unit test-rules test-integration lint bench fuzz check-deploy image images kafka docker-up deps clean

build: ## static binary into bin/
	CGO_ENABLED=0 $(GO) build -trimpath -buildvcs=auto -ldflags '-X main.version=$(VERSION)' -o $(BIN) ./cmd/notification-worker

# The embedded broker is linked only into a development build (-tags
# devbroker); `make build` and the image carry none.
run: ## the 2026-04-02 incident replayed on an embedded broker, in-memory store, console notifier
	$(GO) run -tags devbroker ./cmd/notification-worker demo

test: deps test-unit test-rules test-integration ## every test

# The fast tests mostly wait on the processes they start (redis-server,
# Sentinels, worker binaries), using about a quarter of two cores: three
# packages run at once (go test's default is one per core), and when every
# package runs, the two longest, cmd/notification-worker and adapters/redis,
# are named first so that they are compiled and started first, while the
# short ones share the third slot.
UNIT_PARALLEL ?= 3
UNIT_FIRST    := $(if $(filter ./...,$(PKGS)),./cmd/notification-worker ./adapters/redis)

test-unit: ## the fast tests (real redis-server and SMTP in-process; no Docker)
	$(GO) test -race -count=1 -p $(UNIT_PARALLEL) -timeout 10m $(UNIT_FIRST) $(PKGS)

test-rules: ## the alert rules (deploy/prometheus) and the dashboard's queries (deploy/grafana) against their promtool tests
	promtool check rules deploy/prometheus/rules.yaml
	promtool test rules deploy/prometheus/rules_test.yaml deploy/grafana/dashboard_test.yaml

# The scenarios mostly wait on their peers, so four run at once on two
# cores (go test's default is one per core); the ones that must not share
# the machine with others are not parallel and run first, alone.
INTEGRATION_PARALLEL ?= 4

test-integration: images ## end-to-end scenarios on testcontainers (needs a Docker engine)
	$(GO) test -race -tags integration -count=1 -parallel $(INTEGRATION_PARALLEL) -timeout 20m ./integration/...

deps: ## install what the tests need on a fresh Debian machine (root)
	scripts/deps.sh

docker-up: ## start a Docker engine (host networking only) if none answers
	scripts/docker-up.sh

images: docker-up ## build the local images the integration suite runs (Apache Kafka's included)
	scripts/build-images.sh

kafka: docker-up ## Apache Kafka's jars from Maven Central (integration/pom.xml) and its local image
	scripts/build-images.sh kafka

image: docker-up ## the production image (FROM scratch, non-root), from the Dockerfile
	scripts/build-images.sh worker

lint: ## gofmt and go vet (also the development build's and the integration suite's files), as CI runs them
	@out=$$($$($(GO) env GOROOT)/bin/gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt: not formatted:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)
	$(GO) vet -tags devbroker $(PKGS)
	$(GO) vet -tags integration ./integration/...

fuzz: ## every fuzz target for FUZZTIME each (default 15s), on top of its seed corpus
	scripts/fuzz.sh

bench: ## throughput and capacity, as ratios against baselines measured in the same run
	$(GO) test -run '^$$' -bench . -benchtime 1x -count 1 -timeout 35m ./integration/bench/

check-deploy: ## deploy/compose.yaml, deploy/k8s and the Helm chart (deploy/helm) linted, rendered and validated offline
	scripts/check-deploy.sh

clean:
	rm -rf bin
