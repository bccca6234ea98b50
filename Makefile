# daytwo developer entry points. `make help` lists them.
SHELL := /usr/bin/env bash -o pipefail
.SHELLFLAGS := -ec

K8S_VERSION ?= v1.36.3
DAYTWO_CACHE ?= $(HOME)/.cache/daytwo
K8S_BIN := $(DAYTWO_CACHE)/k8s-$(K8S_VERSION)
export KUBEBUILDER_ASSETS := $(K8S_BIN)
export PATH := $(K8S_BIN):$(PATH)

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -s -w -X github.com/daytwo-dev/daytwo/internal/version.Version=$(VERSION)
CONTROLLER_GEN := go tool controller-gen

.PHONY: help
help: ## Show this help.
	@grep -hE '^[a-zA-Z_-]+:.*?## ' $(MAKEFILE_LIST) | awk 'BEGIN{FS=":.*?## "}{printf "  \033[36m%-14s\033[0m %s\n",$$1,$$2}'

##@ Development

.PHONY: dev
dev: ## Start a local cluster, the operator and the samples, and show the result.
	hack/dev.sh up

.PHONY: dev-down
dev-down: ## Stop everything `make dev` started.
	hack/dev.sh down

.PHONY: generate
generate: ## Generate deepcopy code, and the CRD rule on the settings daytwo manages (v1alpha1.ManagedParameters).
	go run ./hack/gen-managed-rule
	$(CONTROLLER_GEN) object paths=./api/...

.PHONY: manifests
manifests: ## Generate CRDs and RBAC from markers, the Argo CD ConfigMap from its health check, a runbook page per alert, the API reference, the chart's copies of config/ and its README.
	$(CONTROLLER_GEN) crd paths=./api/... output:crd:artifacts:config=config/crd/bases
	$(CONTROLLER_GEN) rbac:roleName=daytwo-manager paths=./internal/... output:rbac:artifacts:config=config/rbac
	hack/argocd-cm.sh
	go run ./hack/gen-runbooks
	hack/chart-sync.sh
	hack/build-addons.sh helm-docs crd-ref-docs >/dev/null
	$(DAYTWO_CACHE)/addons/helm-docs --chart-search-root charts --log-level warning
	$(DAYTWO_CACHE)/addons/crd-ref-docs --source-path=api/v1alpha1 --config=hack/crd-ref-docs.yaml --renderer=markdown \
	  --output-path=docs/api-reference.md --log-level=WARN

.PHONY: verify-generated
verify-generated: generate manifests ## Fail if generated files are stale.
	@git diff --exit-code -- api config charts || { echo "generated files are stale: run 'make generate manifests' and commit"; exit 1; }

.PHONY: fmt
fmt: ## gofmt the tree.
	gofmt -w $$(git ls-files '*.go')

# golangci-lint with kube-api-linter compiled in, built from hack/tools'
# go.mod once per version (a few minutes on a fresh machine).
GOLANGCI_LINT := $(DAYTWO_CACHE)/tools/golangci-lint-$(shell sha256sum hack/tools/go.sum | cut -c1-12)
$(GOLANGCI_LINT):
	mkdir -p $(dir $@)
	cd hack/tools && go build -o $@ sigs.k8s.io/kube-api-linter/cmd/golangci-lint-kube-api-linter

.PHONY: lint
lint: $(GOLANGCI_LINT) ## golangci-lint (.golangci.yml says which linters and why), kube-api-linter on api/.
	$(GOLANGCI_LINT) run ./...

.PHONY: vet
vet: ## go vet, including the e2e build tag.
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo "gofmt needed"; exit 1; }
	go vet ./...
	go vet -tags e2e ./test/...
	go vet -tags bench ./test/bench/...
	go vet -tags e2e,bench ./test/bench/failover/
	cd hack/release && go vet ./...

##@ Build

.PHONY: build
build: ## Build bin/daytwo and the kubectl plugin bin/kubectl-daytwo.
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o bin/daytwo ./cmd/daytwo
	CGO_ENABLED=0 go build -trimpath -ldflags '$(LDFLAGS)' -o bin/kubectl-daytwo ./cmd/kubectl-daytwo

.PHONY: tools
tools: ## Build the Kubernetes, etcd and kwok binaries into the cache (minutes, once).
	hack/build-k8s.sh

##@ Deployment (against the current kubeconfig, as kubebuilder projects do)

IMG ?= localhost/daytwo:dev

.PHONY: run
run: build ## Run the operator on this host against the current kubeconfig (CRDs first: make install).
	bin/daytwo operator --metrics-bind-address=127.0.0.1:18080 --metrics-secure=false --health-probe-bind-address=127.0.0.1:18081 --webhook-port=0 --instance-image=$(IMG)

.PHONY: install
install: ## Install the CRDs into the current kubeconfig's cluster.
	kubectl apply --server-side -k config/crd

.PHONY: uninstall
uninstall: ## Remove the CRDs, and every daytwo object with them.
	kubectl delete --ignore-not-found -k config/crd

.PHONY: deploy
deploy: ## Install daytwo (config/default) with image IMG into the current kubeconfig's cluster.
	kubectl kustomize config/default | sed 's|localhost/daytwo:dev|$(IMG)|g' | kubectl apply --server-side --force-conflicts -f -
	kubectl -n daytwo-system rollout status deploy/daytwo-operator --timeout=120s

.PHONY: undeploy
undeploy: ## Remove what make deploy installed, CRDs and daytwo objects included.
	kubectl kustomize config/default | kubectl delete --ignore-not-found -f -

.PHONY: docker-build
docker-build: ## Build image IMG: with Docker where it runs, else without it (hack/release, this machine's platform, into dist/oci).
	@if docker info >/dev/null 2>&1; then docker build -t $(IMG) .; \
	else cd hack/release && go run . -image $(IMG) -platforms linux/$$(go env GOARCH) -root ../.. -dist ../../dist -push=false; fi

.PHONY: docker-push
docker-push: ## Push image IMG: with Docker where it runs, else build and push it without (hack/release; plain HTTP to 127.0.0.1 and localhost).
	@if docker info >/dev/null 2>&1; then docker push $(IMG); \
	else cd hack/release && go run . -image $(IMG) -platforms linux/$$(go env GOARCH) -root ../.. -dist ../../dist; fi

.PHONY: installer
installer: ## Render dist/install.yaml from config/default.
	mkdir -p dist
	kubectl kustomize config/default > dist/install.yaml

.PHONY: release
release: tools ## Build a release into dist/ and push it to REGISTRY: images (amd64, arm64) with SBOMs, install.yaml, the chart, the plugin (VERSION=v0.1.0 REGISTRY=127.0.0.1:5000).
	hack/release.sh

##@ Test

# The PostgreSQL the data-path tests run on, and the other versions that
# run the tests where versions differ (PG_VERSIONED: pg_rewind, pg_basebackup,
# recovery, pg_dump and pg_restore, roles, configuration names).
PG_MAIN ?= 17
PG_OTHERS ?= 15 18
PG_VERSIONED ?= TestPrimaryLifecycle|TestMetricsOfAPrimaryAndItsReplica|TestReplicaWhoseWALIsGoneIsClonedAgain|TestFailoverPromotesFencesAndRejoins|TestDivergedReplicaIsRewound|TestOldPrimaryThatCannotRewindIsClonedAgain|TestReplicaBehindALoweredSettingStarts|TestBaseBackup|TestRestoreFromBackup|TestBackupToMinIORestoresTheSameData|TestLogicalBackupCompressesAndBringsBackRoles|TestCorruptBackupIsRefused|TestNotAnArchiveIsNotABackup|TestRestorerFetchesAhead|TestArchiverShipsEverySegmentToMinIO|TestRenderRoundTripsThroughPostgres|TestDeclaredRolesAreMadeKeptAndDropped|TestDeclaredDatabasesAreMadeKeptAndDropped
# Tests that start their own PostgreSQL servers run side by side (t.Parallel):
# they mostly wait on PostgreSQL, so more of them than cores keeps both busy.
TEST_PARALLEL ?= 4
PG_VERSIONED_PKGS ?= ./internal/instance/ ./internal/backup/ ./internal/wal/ ./internal/postgres/

.PHONY: deps
deps: ## Install what the data-path tests need: PostgreSQL $(PG_MAIN) and $(PG_OTHERS) and PgBouncer (hack/pgroot.sh) and a MinIO build.
	hack/deps.sh
	for v in $(PG_MAIN) $(PG_OTHERS) pgbouncer; do hack/pgroot.sh $$v >/dev/null || exit 1; done

.PHONY: test
test: tools deps vet verify-generated ## Unit, envtest and real-PostgreSQL integration tests: all on PostgreSQL $(PG_MAIN), the version-sensitive ones on $(PG_OTHERS) too.
	@start=$$(date +%s); DAYTWO_PG_BINDIR=$$(hack/pgroot.sh $(PG_MAIN)) DAYTWO_PGBOUNCER=$$(hack/pgroot.sh pgbouncer) go test -count=1 -parallel $(TEST_PARALLEL) -timeout 20m ./... \
	  && echo "=== make test: PostgreSQL $(PG_MAIN), every package: $$(( $$(date +%s) - start ))s"
	@# The other versions side by side: each alone leaves a core idle while its
	@# serial tests run. Each one's output is printed whole once it ends.
	@start=$$(date +%s); logs=$$(mktemp -d); trap 'rm -rf $$logs' EXIT; pids=; \
	for v in $(PG_OTHERS); do \
	  ( rc=0; DAYTWO_PG_BINDIR=$$(hack/pgroot.sh $$v) go test -count=1 -parallel $(TEST_PARALLEL) -timeout 20m -run '$(PG_VERSIONED)' $(PG_VERSIONED_PKGS) \
	      > $$logs/$$v.log 2>&1 || rc=$$?; cat $$logs/$$v.log; \
	    echo "=== make test: PostgreSQL $$v, version-sensitive tests: $$(( $$(date +%s) - start ))s (exit $$rc)"; exit $$rc ) & pids="$$pids $$!"; \
	done; rc=0; for p in $$pids; do wait $$p || rc=1; done; exit $$rc

.PHONY: test-e2e
test-e2e: tools ## End-to-end suites (build tag e2e) on the local cluster: the real node where it runs, kwok otherwise.
	hack/e2e.sh

##@ Benchmarks

.PHONY: bench-backup
bench-backup: deps ## Backup benchmark: daytwo vs raw pg_dump/pg_restore and pgBackRest on MinIO (BENCH_MB=1024).
	hack/deps.sh pgbackrest
	go test -tags bench -count=1 -run TestBenchBackup -v -timeout 60m ./test/bench/backup/ | hack/bench-record.sh backup

.PHONY: bench-upgrade
bench-upgrade: deps ## Major upgrade 15 to 17 of BENCH_MB (1024) of pgbench data: daytwo's copy mode vs cp -a (floor) and link mode.
	go test -tags bench -count=1 -run TestBenchUpgrade -v -timeout 30m ./test/bench/upgrade/ | grep -vE '^(=== RUN|--- PASS)' | hack/bench-record.sh upgrade

.PHONY: bench-cache
bench-cache: tools ## Operator heap with 1000 unrelated Secrets and ConfigMaps vs an empty cluster (BENCH_OBJECTS, BENCH_BYTES).
	go test -tags bench -count=1 -run TestBenchCache -v ./test/bench/cache/ | grep -E '^(operator heap|BENCH)|FAIL|^ok' | hack/bench-record.sh cache

.PHONY: bench-failover
bench-failover: tools ## Failover benchmark on the real node: write gaps for pod delete, freeze, postgres kill, switchover, planned restart, minor upgrade, real partitions (BENCH_ROUNDS=5, BENCH_CONFIGS=2,3,3s; 3s:10@delete+freeze = those faults, 10 rounds).
	E2E_PKG=./test/bench/failover E2E_TAGS=e2e,bench E2E_RUN=TestBenchFailover E2E_TIMEOUT=80m hack/e2e.sh | hack/bench-record.sh failover

.PHONY: bench-webapp
bench-webapp: tools build ## WebApp benchmark on the kwok cluster (BENCH_N=1000, BENCH_ROUNDS=1, BENCH_LATENCY_SECONDS=60; BENCH_ROUNDS=3 for the medians the goals are read from).
	@# A fresh cluster: an earlier run's thousands of objects would take minutes to delete.
	@# The bench gives the operator a fresh one of the same nodes in turn.
	@# 110 pods a node: room for N pods and rollout surges.
	export KWOK_NODES=$${KWOK_NODES:-$$(( $${BENCH_N:-1000} / 90 + 2 ))}; \
	  hack/kwok-cluster.sh down && hack/kwok-cluster.sh up && \
	  kubectl --kubeconfig $$(hack/kwok-cluster.sh kubeconfig) apply --server-side -k config/crd >/dev/null && \
	  KUBECONFIG=$$(hack/kwok-cluster.sh kubeconfig) DAYTWO_BIN=$(CURDIR)/bin/daytwo go run ./test/bench/webapp | hack/bench-record.sh webapp

.PHONY: bench-database
bench-database: tools build ## Database benchmark on the kwok cluster: heap, no-op writes, reconcile p99 and requests at rest per Database (BENCH_N=500, BENCH_REST_SECONDS=60).
	@# A fresh cluster, as bench-webapp's.
	export KWOK_NODES=$${KWOK_NODES:-$$(( $${BENCH_N:-500} / 90 + 2 ))}; \
	  hack/kwok-cluster.sh down && hack/kwok-cluster.sh up && \
	  kubectl --kubeconfig $$(hack/kwok-cluster.sh kubeconfig) apply --server-side -k config/crd >/dev/null && \
	  KUBECONFIG=$$(hack/kwok-cluster.sh kubeconfig) DAYTWO_BIN=$(CURDIR)/bin/daytwo go run ./test/bench/database | hack/bench-record.sh database

##@ Local cluster

.PHONY: cluster-up
cluster-up: ## Start the local cluster: a real node (root on Linux) or kwok nodes; says which.
	hack/cluster.sh up

.PHONY: cluster-down
cluster-down: ## Stop the local cluster and remove what it left on the host.
	hack/cluster.sh down

.PHONY: images
images: ## Build the image tarballs (daytwo, postgres, demo web, MinIO, ...) and load them into a running real node.
	hack/images.sh
	if [ "$$(hack/cluster.sh mode)" = real ] && [ -S "$(DAYTWO_CACHE)/realnode/run/containerd.sock" ]; then hack/realnode.sh load; fi
