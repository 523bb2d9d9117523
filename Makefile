# cdplane build, code generation and tests. `make help` lists the targets.
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

GO ?= go
# Tests run with the race detector; the control-plane binaries come from hack/k8s-bins.sh.
GOTEST_FLAGS ?= -race -count=1 -timeout 45m
BIN_DIR ?= bin
# The one version source: the image tag, both charts' version and appVersion (a test holds
# them equal) and what every binary reports (embedded by internal/version).
VERSION := $(shell cat internal/version/VERSION)
COMMIT ?= $(shell git rev-parse --short=12 HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD -- 2>/dev/null || echo -dirty)
# Every time in the image and the release: the last commit's (reproducible builds).
SOURCE_DATE_EPOCH ?= $(shell git log -1 --format=%ct 2>/dev/null || echo 0)
export SOURCE_DATE_EPOCH
# go-nvml binds deprecated NVML calls; its cgo code would print hundreds of deprecation
# warnings on every cold build. Go's default flags without them (also in hack/image).
CGO_CFLAGS ?= -O2 -g -Wno-deprecated-declarations
export CGO_CFLAGS
IMAGE_DIR ?= $(BIN_DIR)/image
IMAGE_ARCHIVE ?= $(IMAGE_DIR)/cdplane-$(VERSION).oci.tar
# The image's platforms: one archive, an index of one image per platform. arm64 needs Debian's
# cross compiler and dpkg's arm64 architecture (docs/installing.md, "Building the image").
IMAGE_PLATFORMS ?= linux/amd64,linux/arm64
RELEASE_DIR ?= $(BIN_DIR)/release/$(VERSION)

.PHONY: help
help: ## List the targets
	@grep -hE '^[a-zA-Z0-9_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-12s %s\n", $$1, $$2}'

.PHONY: generate
generate: ## Generate deepcopy code and typed apply configurations for the API types
	$(GO) tool controller-gen object applyconfiguration paths=./api/...

.PHONY: manifests
manifests: ## Generate the CRD manifests into the prerequisites chart
	$(GO) tool controller-gen crd paths=./api/... output:crd:artifacts:config=deployments/helm/cdplane-prerequisites/templates/crds

.PHONY: verify
verify: ## Fail when generated code, manifests, formatting or go.mod drift
	hack/verify.sh

.PHONY: fmt
fmt: ## Format the Go code
	$(GO) fmt ./...

.PHONY: vet
vet: ## Run go vet
	$(GO) vet ./...

.PHONY: lint
lint: ## Run golangci-lint (built from the module proxy on first use)
	cd hack/tools/lint && $(GO) build -o $(CURDIR)/$(BIN_DIR)/golangci-lint github.com/golangci/golangci-lint/v2/cmd/golangci-lint
	$(BIN_DIR)/golangci-lint run ./...

.PHONY: k8s-bins
k8s-bins: ## Build etcd and the Kubernetes control plane for tests into the cache (prints the directory; KUBERNETES_VERSION=v1.34 for the oldest supported)
	hack/k8s-bins.sh $(KUBERNETES_VERSION)

.PHONY: test
test: verify lint ## Generated code and lint, then unit, integration and end-to-end tests (builds the control plane on first run)
	@dir="$$(hack/k8s-bins.sh | tail -n1)"; \
	echo ">> control-plane binaries: $$dir"; \
	CDPLANE_K8S_BINS="$$dir" $(GO) test $(GOTEST_FLAGS) $$($(GO) list ./... | grep -v /test/e2e)
	$(MAKE) --no-print-directory test-integration-oldest
	$(MAKE) --no-print-directory test-e2e
	$(MAKE) --no-print-directory test-e2e-oldest

# The admission-policy suite (the attacker tests of docs/security.md) on the oldest supported
# release too: there no MutatingAdmissionPolicy is served, and the validating policies carry
# more.
.PHONY: test-integration-oldest
test-integration-oldest: ## The planes (admission policy) suite on the oldest supported Kubernetes (builds its control plane on first run)
	@dir="$$(hack/k8s-bins.sh $(E2E_OLDEST_KUBERNETES) | tail -n1)"; \
	echo ">> control-plane binaries: $$dir"; \
	CDPLANE_K8S_BINS="$$dir" $(GO) test $(GOTEST_FLAGS) ./test/integration/planes/

.PHONY: test-e2e
test-e2e: ## End-to-end scenarios on one simulated cluster (cdplane sim), no race detector
	CDPLANE_E2E=1 $(GO) test -count=1 -timeout 40m -v ./test/e2e/...

# The oldest supported Kubernetes release (hack/tools/k8s-v1.34), where no MutatingAdmissionPolicy
# v1 is served: channel injection, leader failover and two planes side by side.
E2E_OLDEST_KUBERNETES ?= v1.34
# What `make soak` repeats: what must hold every time, not most times.
SOAK_COUNT ?= 20
SOAK_SCENARIOS ?= ^(TestFailoverDuringTwoRackJob|TestLeaderFailoverWhileDomainsJoin|TestControllerRestartWithLiveDomain|TestAPIServerRestartWithLiveDomains|TestKubeletPluginRestartWithRunningWorkloads|TestBackToBackDomainsOnTheSameNodes)$$
E2E_OLDEST_SCENARIOS ?= ^(TestChannelInjection|TestFailoverDuringTwoRackJob|TestTwoPlanesSideBySide)$$

.PHONY: test-e2e-oldest
test-e2e-oldest: ## The main end-to-end scenarios on the oldest supported Kubernetes (builds its control plane on first run)
	CDPLANE_E2E=1 CDPLANE_E2E_KUBERNETES_VERSION=$(E2E_OLDEST_KUBERNETES) $(GO) test -count=1 -timeout 40m -v -run '$(E2E_OLDEST_SCENARIOS)' ./test/e2e/...

.PHONY: soak
soak: ## The failover, restart and back-to-back scenarios SOAK_COUNT times (default 20) on one simulated cluster, each run reported
	set -o pipefail; CDPLANE_E2E=1 $(GO) test -json -count=$(SOAK_COUNT) -timeout $$(( $(SOAK_COUNT) * 15 ))m -run '$(SOAK_SCENARIOS)' ./test/e2e/ | $(GO) run ./hack/soak -runs $(SOAK_COUNT)

.PHONY: test-unit
test-unit: ## Unit tests only (no control plane)
	$(GO) test $(GOTEST_FLAGS) $$($(GO) list ./... | grep -v /test/)

.PHONY: build
build: ## Build the binaries into bin/
	$(GO) build -ldflags "-X cdplane/internal/version.Commit=$(COMMIT)" -o $(BIN_DIR)/ ./cmd/...

.PHONY: image
image: ## Build the OCI image archive (linux/amd64 and linux/arm64) into bin/image/ (no container engine, no registry)
	$(GO) run ./hack/image image --out $(IMAGE_ARCHIVE) --commit $(COMMIT) --platforms $(IMAGE_PLATFORMS)

.PHONY: gpu-check
gpu-check: ## On a GPU machine: every binary's --version, and NVML found under the driver root with the clique it derives (NVIDIA_DRIVER_ROOT, default /)
	hack/gpu-check.sh

.PHONY: release
release: image ## Write the image archive (both platforms), both packaged charts and SHA256SUMS into bin/release/<version>/
	$(GO) run ./hack/image release --image $(IMAGE_ARCHIVE) --out $(RELEASE_DIR)
