# cgpilot Makefile. `make help` lists the targets; README.md explains the tiers.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := build

GO ?= go
CACHE_DIR ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/cgpilot

# Test packages per tier. A pattern whose directory holds no Go files yet is
# skipped, so the targets work while the packages are being written.
V2_PKGS ?= ./test/v2/... ./cgroup/... ./test/cgtest/... ./agent/...
E2E_PKGS ?= ./test/e2e/... ./test/harness/... ./test/deploy/... ./api/...
# make test-v2 PKG=./cgroup/... runs just that in the VM.
PKG ?=
# Extra go test flags, e.g. TESTFLAGS='-run TestX -v'.
TESTFLAGS ?=
# The race detector is on in the unit, kernel and e2e tiers (it needs cgo
# and a C compiler); RACE= turns it off for a quick local run.
RACE ?= -race
# A package's tests under -race may take minutes on a shared 2-core machine
# (the trace replays: TestBitbrainsReference, TestLiveEqualsReplay); go
# test's own 10-minute default ended them there.
UNIT_TIMEOUT ?= 30m
E2E_TIMEOUT ?= 45m
FUZZTIME ?= 20s
BENCHFLAGS ?= -benchmem


present = $(strip $(foreach p,$(1),$(if $(shell find $(patsubst %/...,%,$(p)) -name '*.go' -print -quit 2>/dev/null),$(p))))

.PHONY: help build test test-unit test-kernel test-v2 test-v2node test-e2e bench bench-all lint fuzz generate deps demo demo-down demo-v2

help:
	@echo "build       build cgpilot-agent and cgpilotctl into bin/"
	@echo "test        install what is missing (make deps), then every test tier this machine supports: unit, kernel, v2, v2node, e2e"
	@echo "test-unit   go vet + go test ./... (no root, no kernel, no cluster)"
	@echo "test-kernel real cgroup writes on this host (root)"
	@echo "test-v2     tests in a cgroup v2 qemu VM (PKG=./pkg/... to choose; default: $(V2_PKGS))"
	@echo "test-v2node the node tier in the cgroup v2 VM: control plane, containerd 2, runc, kubelet and the agent (test/v2node/run.sh)"
	@echo "test-e2e    real etcd + kube-apiserver (+ kubelet/containerd 2 as root): $(E2E_PKGS)"
	@echo "bench       the control paths beside their floors, and the footprint: a table, $(BENCH_OUT) and the README's table in $(BENCH_MD) (PATHS=...)"
	@echo "bench-all   go test -bench over all packages"
	@echo "fuzz        each FuzzXxx target for FUZZTIME=$(FUZZTIME)"
	@echo "generate    regenerate the API deepcopy, CRDs, chart copies and eBPF objects; fail if the committed ones differ"
	@echo "lint        gofmt, go vet, staticcheck (pinned in hack/tool.sh), hack/check-imports.sh (and its -selftest), helm lint"
	@echo "deps        what is missing: apt packages (as root), Kubernetes binaries, containerd 2 + runc, v2 VM kernel (hack/deps.sh; make test and make demo run it)"
	@echo "demo        (root) install what is missing, then the whole agent on a local single-node cluster, step by step"
	@echo "demo-down   remove everything make demo started"
	@echo "demo-v2     the same demo on a cgroup v2 node in the qemu VM (TCG: about 6 min on a quiet machine; no root needed), then its teardown: the VM ends with the run"

build:
	$(GO) build -trimpath -o bin/ ./cmd/...

# Tiers run in order; one that cannot run here says why and is skipped, and
# `make test` fails if any tier that ran failed. It first installs what is
# missing (hack/deps.sh test); what cannot be installed here (not root, not
# Debian) only skips the tiers that need it.
test:
	@hack/deps.sh test || echo "==> make test: some dependencies are missing (above); the tiers that need them are skipped"
	@export V2_PRESENT="$(call present,$(V2_PKGS))" E2E_PRESENT="$(call present,$(E2E_PKGS))" RACE="$(RACE)"; \
	rc=0; summary=""; \
	for t in unit kernel v2 v2node e2e; do \
	  if why=$$(hack/tier-check.sh $$t); then \
	    echo "==> tier $$t"; \
	    if $(MAKE) --no-print-directory test-$$t; then r=PASS; else r=FAIL; rc=1; fi; \
	  else \
	    r="skipped: $$why"; echo "==> tier $$t $$r"; \
	  fi; \
	  summary+=$$(printf '  %-7s %s' "$$t" "$$r")$$'\n'; \
	done; \
	echo "==> make test summary"; printf '%s' "$$summary"; \
	[ $$rc = 0 ] && echo "make test: PASS" || echo "make test: FAIL"; exit $$rc

# test/vpacompat is its own module (it imports upstream VPA, which the main
# module must not carry): it proves the VPA mode equals VPA 1.8.1.
# The pinned tools (controller-gen, helm) are built first, with progress,
# so that the tests that use them find them warm.
test-unit:
	hack/tool.sh controller-gen >/dev/null
	hack/tool.sh helm >/dev/null
	$(GO) vet ./...
	$(GO) test $(RACE) -timeout $(UNIT_TIMEOUT) $(TESTFLAGS) ./...
	cd test/vpacompat && $(GO) vet ./... && $(GO) test $(RACE) -timeout $(UNIT_TIMEOUT) $(TESTFLAGS) ./...

# All packages, one at a time: kernel tests share the host's cgroups.
# -count=1 because the results depend on the kernel, which go test cannot hash.
test-kernel:
	@if ! why=$$(hack/tier-check.sh kernel); then echo "test-kernel: $$why" >&2; exit 1; fi
	CGPILOT_TEST_KERNEL=1 $(GO) test $(RACE) -count=1 -p 1 -timeout $(UNIT_TIMEOUT) $(TESTFLAGS) ./...

test-v2:
	@pkgs="$(or $(PKG),$(call present,$(V2_PKGS)))"; \
	if [ -z "$$pkgs" ]; then echo "test-v2: none of $(V2_PKGS) exist on this branch: nothing to run"; exit 0; fi; \
	echo "test/v2vm/run.sh $$pkgs $(TESTFLAGS)"; \
	test/v2vm/run.sh $$pkgs $(TESTFLAGS)

# The node tier on cgroup v2: control plane, containerd 2, runc and the
# kubelet inside the v2 VM (test/v2node/run.sh; TESTFLAGS as for go test,
# default -run TestNodeOnCgroupV2 -v). Without TESTFLAGS a second boot then
# runs the DaemonSet there: make demo-v2's TestDemoUpAndDown (the cgroup-v2
# kustomize component, the admission policy, the agent's mounts seen from its
# own namespace, an in-place resize and an OOM raise by the DaemonSet, then
# make demo-down's leak check), with a shorter time limit than make demo-v2
# (V2NODE_DEMO_TIMEOUT). Both boots run even if the first fails.
V2NODE_DEMO_TIMEOUT ?= 1200
test-v2node:
	@if ! why=$$(hack/tier-check.sh v2node); then echo "test-v2node: $$why" >&2; exit 1; fi
	@rc=0; echo "test/v2node/run.sh $(TESTFLAGS)"; test/v2node/run.sh $(TESTFLAGS) || rc=1; \
	if [ -n "$(TESTFLAGS)" ]; then exit $$rc; fi; \
	if ! why=$$(hack/tier-check.sh v2demo); then echo "test-v2node: the DaemonSet on the v2 node (TestDemoUpAndDown) skipped: $$why"; exit $$rc; fi; \
	echo "==> the DaemonSet on the v2 node: V2NODE_DEMO=1 V2NODE_TIMEOUT=$(V2NODE_DEMO_TIMEOUT) test/v2node/run.sh"; \
	t0=$$(date +%s); V2NODE_DEMO=1 V2NODE_TIMEOUT=$(V2NODE_DEMO_TIMEOUT) test/v2node/run.sh || rc=1; \
	echo "test-v2node: the DaemonSet on the v2 node took $$(( $$(date +%s) - t0 )) s"; exit $$rc

# The agent's e2e tests (test/e2e/agent_*) drive real kubelet-style cgroups
# too, so they also need the kernel tier (root); without it they skip and say so.
test-e2e:
	@pkgs="$(call present,$(E2E_PKGS))"; \
	if [ -z "$$pkgs" ]; then echo "test-e2e: none of $(E2E_PKGS) exist on this branch: nothing to run"; exit 0; fi; \
	bins=$$(test/k8sbins/build.sh) || { echo "test-e2e: building the Kubernetes binaries failed (see above)" >&2; exit 1; }; \
	desched=$$(test/deschedbin/build.sh) || { echo "test-e2e: building the descheduler failed (see above)" >&2; exit 1; }; \
	node=0; kernel=0; runtime=; \
	if why=$$(hack/tier-check.sh node); then \
	  runtime=$$(test/runtimebins/build.sh) || { echo "test-e2e: building the node's container runtime failed (see above)" >&2; exit 1; }; node=1; \
	else echo "test-e2e: node tier off: $$why"; fi; \
	if why=$$(hack/tier-check.sh kernel); then kernel=1; else echo "test-e2e: agent tests with real cgroups off: $$why"; fi; \
	echo "CGPILOT_K8S_BINS=$$bins CGPILOT_RUNTIME_BINS=$$runtime CGPILOT_DESCHEDULER=$$desched CGPILOT_TEST_E2E=1 CGPILOT_TEST_NODE=$$node CGPILOT_TEST_KERNEL=$$kernel go test $(RACE) -count=1 -p 1 -timeout $(E2E_TIMEOUT) $(TESTFLAGS) $$pkgs"; \
	CGPILOT_K8S_BINS=$$bins CGPILOT_RUNTIME_BINS=$$runtime CGPILOT_DESCHEDULER=$$desched CGPILOT_TEST_E2E=1 CGPILOT_TEST_NODE=$$node CGPILOT_TEST_KERNEL=$$kernel \
	  $(GO) test $(RACE) -count=1 -p 1 -timeout $(E2E_TIMEOUT) $(TESTFLAGS) $$pkgs

# The control paths beside their floors and the agent's footprint, in one
# run (root: kernel, e2e and node tiers; about 25 minutes, more while
# another node test holds the host's node): PATHS=annotation,refresh to
# choose, BENCH_OUT for the JSON, BENCH_MD for the README's table. Not part of make test. footprint is the
# agent alone against 1,000 fake pods; nodefootprint the real node at its
# maxPods (110) with the kubelet's and containerd's CPU beside the agent's.
PATHS ?= annotation,refresh,resize,footprint,nodefootprint
BENCH_OUT ?= bench.json
BENCH_MD ?= bench.md
bench:
	$(GO) run ./hack/benchpaths -paths $(PATHS) -out $(BENCH_OUT) -md $(BENCH_MD)

# Every go test benchmark of every package (the tiers' env vars unset:
# those that need root or a cluster skip).
bench-all:
	$(GO) test -run '^$$' -bench . $(BENCHFLAGS) ./...

# Fuzz targets are found with `go test -list`, so a new FuzzXxx needs no edit here.
fuzz:
	@targets=$$($(GO) test -list '^Fuzz' ./... | awk '/^Fuzz/ { n[++c] = $$1; next } /^ok / { for (i = 1; i <= c; i++) print $$2 " " n[i]; c = 0 }'); \
	if [ -z "$$targets" ]; then echo "fuzz: no FuzzXxx targets yet"; exit 0; fi; \
	rc=0; \
	while read -r pkg fn; do \
	  echo "==> $$pkg $$fn ($(FUZZTIME))"; \
	  $(GO) test -run '^$$' -fuzz "^$$fn\$$" -fuzztime $(FUZZTIME) "$$pkg" || rc=1; \
	done <<<"$$targets"; \
	exit $$rc

# Generated files are committed, so building needs neither clang nor
# controller-gen; this regenerates them and fails if the committed ones were
# stale: the API's deepcopy code, the CRDs in deploy/crds and the Helm
# chart's copies (hack/generate.sh, controller-gen pinned in hack/tool.sh),
# then the eBPF OOM watcher's object and Go bindings (clang-19).
generate:
	hack/generate.sh
	@command -v clang-19 >/dev/null || { echo "generate: clang-19 not found: apt-get install clang-19 llvm-19 libbpf-dev" >&2; exit 1; }
	$(GO) generate ./agent/oomwatch
	@stale=$$(git status --porcelain --untracked-files=all -- api/v1alpha1/zz_generated.deepcopy.go deploy/crds deploy/helm/cgpilot/files agent/oomwatch); \
	if [ -n "$$stale" ]; then echo "$$stale"; echo "generate: committed generated files were stale; commit the regenerated ones" >&2; exit 1; fi

# Every check runs, so one lint run lists all problems.
lint:
	@rc=0; \
	files=$$(find . -name '*.go' -not -path './.git/*' -not -path '*/testdata/*' -not -path './bin/*' -not -path './_output/*'); \
	echo "gofmt -l"; unformatted=$$(gofmt -l $$files); \
	if [ -n "$$unformatted" ]; then echo "gofmt: run gofmt -w on:"; echo "$$unformatted"; rc=1; fi; \
	echo "go vet ./..."; $(GO) vet ./... || rc=1; \
	echo "staticcheck ./..."; sc=$$(hack/tool.sh staticcheck) && $$sc ./... || rc=1; \
	echo "hack/check-imports.sh"; hack/check-imports.sh || rc=1; \
	echo "hack/check-imports.sh -selftest"; hack/check-imports.sh -selftest || rc=1; \
	echo "helm lint deploy/helm/cgpilot"; helm=$$(hack/tool.sh helm) && $$helm lint --strict deploy/helm/cgpilot || rc=1; \
	[ $$rc = 0 ] && echo "lint: ok" || echo "lint: FAIL"; exit $$rc

# Installs only what is missing (hack/deps.sh says what it does); the
# Kubernetes binaries, the node's container runtime (containerd 2, runc) and
# the VM kernel are cached under $(CACHE_DIR) and rebuilt/re-fetched only
# when their pins change. Warm, it takes ~0.1 s.
deps:
	@hack/deps.sh all

# The agent on the test bed's single-node cluster, deployed with kubectl
# apply -k of deploy/ from a locally built image; the cluster stays up
# until demo-down. Installs what the demo needs first.
demo:
	@hack/deps.sh demo
	@echo "==> go run ./test/cmd/demo up"
	@CGPILOT_K8S_BINS=$$(test/k8sbins/build.sh --check) CGPILOT_RUNTIME_BINS=$$(test/runtimebins/build.sh --check) $(GO) run ./test/cmd/demo up

demo-down:
	$(GO) run ./test/cmd/demo down

# make demo's steps on the cgroup v2 node of make test-v2node: the whole
# test bed, the agent DaemonSet (with the cgroup-v2 component) and the
# aggregator inside the qemu VM (test/v2node/run.sh, V2NODE_DEMO=1: it runs
# TestDemoUpAndDown there, up then down with its leak check). A VM cannot
# outlive make, so there is no demo-down to run afterwards. make test runs the
# same test in its v2node tier (test-v2node, above).
demo-v2:
	@hack/deps.sh demo-v2
	@if ! why=$$(hack/tier-check.sh v2demo); then echo "demo-v2: $$why" >&2; exit 1; fi
	@echo "==> V2NODE_DEMO=1 test/v2node/run.sh   (the demo in the cgroup v2 VM under TCG: the steps print as they run; the VM ends with the run)"
	@t0=$$(date +%s); rc=0; V2NODE_DEMO=1 test/v2node/run.sh || rc=$$?; \
	  if [ $$rc = 0 ]; then echo "make demo-v2: PASS in $$(( $$(date +%s) - t0 )) s"; \
	  else echo "make demo-v2: FAIL (exit status $$rc) after $$(( $$(date +%s) - t0 )) s"; fi; exit $$rc
