# Entry points. CI (.ci/run) calls `make test`, the same command the README gives.
GO      ?= go
BIN     := bin/nftproxy
PKGS    := ./...
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/nftproxy/nftproxy/cmd/nftproxy/app.Version=$(VERSION)
IMAGE   ?= ghcr.io/nftproxy/nftproxy:$(VERSION)

.PHONY: all build image deps cluster-tools test unit lint golden mutants busy-test busy-run e2e soak bench demo clean

all: build

## build: the nftproxy binary (static, no cgo; -trimpath as the image's, so they share Go's build cache)
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o $(BIN) ./cmd/nftproxy

## image: the multi-arch (linux/amd64, linux/arm64) OCI image, FROM scratch, without a container
## engine: the layout bin/image and the archive bin/nftproxy-image.tar; nothing is pushed
## (deploy/README.md#the-image). IMAGE=REGISTRY/REPO:TAG names it.
image:
	SOURCE_DATE_EPOCH=$$(git log -1 --format=%ct 2>/dev/null || echo 0) $(GO) run ./deploy/image \
		-version $(VERSION) -revision "$$(git rev-parse HEAD 2>/dev/null)" -ref $(IMAGE) -out bin/image -tarball bin/nftproxy-image.tar

## deps: system packages the kernel/e2e tiers and the demo use (nftables, iproute2, conntrack)
deps:
	@test/deps.sh

## cluster-tools: build or find (cached outside the repo, keyed by version) kube-apiserver,
## kube-proxy (v1.34.4 and, for the peers and migration tests, v1.37.2) and etcd for the
## integration tier; the first run compiles them (~15 min on 2 cores, ~4 more for v1.37.2)
cluster-tools:
	$(GO) run ./test/cluster/cmd/prepare

.PHONY: node-tools node

## node-tools: also build (cached the same way) the node tier's kubelet, kube-controller-manager
## and kube-scheduler; the first run compiles them
node-tools:
	$(GO) run ./test/cluster/cmd/prepare -node

## lint: gofmt and go vet
lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet $(PKGS)

## unit: pure tests only (no root, no kernel)
unit:
	NFTPROXY_UNIT_ONLY=1 $(GO) test -race -count=1 $(PKGS)

## test: every tier that runs on this machine (unit, kernel, data-plane e2e, the node tier's short
## profile); needs root
test: deps lint build cluster-tools node-tools
	$(GO) test -race -count=1 -timeout 30m $(PKGS)

## golden: rewrite every golden file (the ruleset builder's whole output, the partial-sync
## scripts) from what the code produces now; review `git diff` of the testdata before committing
golden:
	$(GO) test -count=1 -run '^Test(Ruleset|PartialSync|Sync)Golden$$' ./proxy/ruleset/ ./proxy/reconciler/ ./proxy/proxier/ -update

## mutants: mutation testing (test/mutants) of the builder, the model, the reconciler and the nft
## layer in unit mode: each mutant (a deleted statement, a negated condition, a changed constant
## or boolean) is compiled through `go test -overlay` (the tree is never written) and that
## package's unit tests run against it. Writes the score and every survivor to MUTANTS_OUT.
## About 20 mutants a minute with 2 workers on a busy 2-core machine; the four packages hold
## ~4,800 (proxy/ruleset ~440, ~25 min; nft ~2,800), so MUTANTS_FOR bounds the run: deletions
## of every package are tried first, what is left is listed as not run. MUTANT_PKGS picks
## packages; after adding tests, `go run ./test/mutants -retest $(MUTANTS_OUT) PKG...` tests only
## the survivors again. The kernel tier (nft, proxy/ruleset, proxy/reconciler) could kill more mutants:
## `go run ./test/mutants -kernel` (needs root) runs each mutant's tests without
## NFTPROXY_UNIT_ONLY.
MUTANT_PKGS     ?= ./proxy/ruleset ./proxy/model ./proxy/reconciler ./nft
MUTANTS_FOR     ?= 60m
MUTANTS_WORKERS ?= 2
MUTANTS_OUT     ?= bin/mutants.txt
mutants:
	$(GO) run ./test/mutants -for $(MUTANTS_FOR) -workers $(MUTANTS_WORKERS) -out $(MUTANTS_OUT) $(MUTANT_PKGS)

## busy-test: the real-API-server tiers (test/cluster, test/allocator, test/k8s) beside a CPU hog,
## one `yes` per core for as long as the tests run (killed when they end or fail, and bounded by
## BUSY_FOR even if make is killed): proof that a busy machine does not fail them; a slow
## teardown is logged, never a failure (needs root)
BUSY_PKGS ?= ./test/cluster/... ./test/allocator/... ./test/k8s/...
BUSY_FOR  ?= 90m
busy-test: deps build cluster-tools
	@$(MAKE) --no-print-directory busy-run

# busy-run: `go test $(BUSY_PKGS)` beside the hog, without busy-test's prerequisites.
busy-run:
	@pids=""; for i in $$(seq $$(nproc)); do timeout $(BUSY_FOR) yes >/dev/null & pids="$$pids $$!"; done; \
	trap 'kill $$pids 2>/dev/null' EXIT; trap 'exit 130' INT TERM; \
	echo "busy-test: $$(nproc) CPU hogs (pids$$pids) beside go test $(BUSY_PKGS)"; \
	$(GO) test -race -count=1 -timeout 60m $(BUSY_PKGS)

## e2e: only the packet-level end-to-end tier
e2e: deps build
	$(GO) test -count=1 -v -timeout 20m ./test/e2e/...

## node: only the node tier: nftproxy deployed from deploy/ as a DaemonSet pod on a real kubelet
## and containerd, Services and day-2 operations under traffic; prints figures (needs root)
node: deps node-tools
	NFTPROXY_NODE_FULL=1 $(GO) test -count=1 -v -timeout 40m ./test/node/

## soak: fault-tolerance scenarios, long profile (restart under traffic, drift, 10k-Service churn,
## hostile input, kernel errors, bounded fuzzing), then the 10k-Service churn in Kubernetes mode
## through a real API server; prints tables of figures (needs root)
soak: deps build cluster-tools
	NFTPROXY_SOAK=1 $(GO) test -count=1 -v -timeout 60m ./test/soak/ ./test/property/
	NFTPROXY_SOAK=1 $(GO) test -count=1 -v -timeout 60m -run TestChurnThroughTheAPIServer ./test/k8s/

## bench: the whole benchmark campaign (control plane at 1k/10k/50k Services and 5k × 50 endpoints,
## the nft -f text path, the per-endpoint-chain layout, upstream kube-proxy nftables and iptables
## modes at 100/1k/10k/30k, data-plane first-packet latency, range width); regenerates
## bench/REPORT.md, its plots and results.json
bench: deps build cluster-tools
	$(GO) test -count=1 -timeout 300m -run TestReport -v ./bench/report -args -full

## demo: the main job on the embedded default, in a lab of network namespaces (needs root)
demo: deps build
	$(GO) run ./test/demo -nftproxy $(BIN) -manifests deploy/examples

clean:
	rm -rf bin
