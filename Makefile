# walstream: `make demo` runs the whole product locally, `make test` runs every test.
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT   ?= $(shell git rev-parse HEAD 2>/dev/null)
LDFLAGS  := -X main.version=$(VERSION) -X main.commit=$(COMMIT)
FUZZTIME ?= 60s
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: build deps test demo docs notices manifests release verify-release bench bench-e2e pgo fuzz lint chaos chaos-cluster compat cutover image

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/walstream ./cmd/walstream
	$(GO) build -o bin/devbroker ./cmd/devbroker

# The container image of this tree, with Docker, tagged and stamped with
# VERSION. The release's image is made without Docker by make release.
#   make image VERSION=v0.1.0 IMAGE=registry.example.com/walstream && docker push registry.example.com/walstream:v0.1.0
IMAGE ?= walstream
image:
	docker build --build-arg VERSION=$(VERSION) -t $(IMAGE):$(VERSION) .

# What a target runs, installed when missing and run as root, and only
# that: `scripts/deps.sh TARGET` (demo, demo-kafka, chaos, compat, bench or
# test; scripts/deps.sh --plan TARGET prints what it would install). The
# targets below call it themselves; make deps installs for make test, which
# needs everything: Postgres 15, kcat, gcc, Prometheus (promtool) and busybox
# from Debian, Postgres 14, 16, 17 and 18 from npm, a Java runtime and with
# Maven the Java servers of scripts/java/versions.env.
DEPS := bash scripts/deps.sh
deps:
	$(DEPS) test

# Unit and integration tests, with the race detector. Integration tests start
# their own Postgres (15, and 14 to 18 for the core end-to-end test) and
# broker; with CI set they fail if those cannot start. They build without
# cmd/walstream/default.pgo: the profile changes no behaviour, and compiling
# every dependency again for it made a run with an empty build cache
# minutes longer.
#
# The second line runs the tests of tools/, a module of its own (Helm,
# Kubernetes' API types and the image libraries stay out of walstream's
# go.mod): THIRD_PARTY_NOTICES and the licences, the OCI image, the Helm
# chart (helm lint and rendering with Helm 3 and Helm 4, values.schema.json,
# strict decoding, walstream validate on the rendered Deployment, the helm
# test pod's script under busybox, the README.md helm-docs makes, which go
# run takes from the Go module proxy), deploy/kubernetes, CHANGELOG.md, a
# small release signed, attested and verified as make release and make
# verify-release do, published to and pulled from a registry on loopback,
# and the workflows (actionlint). They only decode and build: no -race.
test:
	$(DEPS) test
	GOFLAGS="$(strip $(GOFLAGS) -pgo=off)" $(GO) test -race -count=1 -timeout 20m ./...
	GOFLAGS="$(strip $(GOFLAGS) -pgo=off)" $(GO) test -C tools -count=1 -timeout 10m ./...

# scripts/demo.sh installs what it runs: scripts/deps.sh demo, or demo-kafka
# with DEMO_BROKER=kafka.
demo:
	bash scripts/demo.sh

# The generated parts of docs/: the configuration reference from the
# settings table in config/config.go, the metrics reference from the
# collectors walstream registers. make test fails when they are stale
# (TestReference); TestDocs checks every link, anchor and flag in docs/.
docs:
	$(GO) test ./cmd/walstream -run '^TestReference$$' -count=1 -update

# THIRD_PARTY_NOTICES, from the modules walstream links; make test fails
# while it is stale, or when a module's licence is not a permissive one.
notices:
	$(GO) test -C tools ./notices -run '^TestNotices$$' -count=1 -update

# What is generated from the Helm chart: deploy/kubernetes/{walstream,monitoring}.yaml,
# the chart rendered with deploy/kubernetes/values.yaml; the definitions of
# the chart's values.schema.json generated from walstream's settings (the
# built walstream's run --help, docs/configuration.md) and
# deploy/prometheus/alerts.yml; the chart's README.md, by helm-docs (pinned
# in tools/chart) from values.yaml's comments. make test fails while any is
# stale.
manifests:
	$(GO) test -C tools ./chart -run '^(TestManifests|TestSchema|TestReadme)$$' -count=1 -update

# The release into dist/ from a clean tree: archives for linux/amd64,
# linux/arm64 and darwin/arm64, SBOMs, the OCI image, the Helm chart,
# release notes and SHA256SUMS, reproducibly, signed with the cosign key
# whose file COSIGN_KEY names (password in COSIGN_PASSWORD): SHA256SUMS.sig,
# and the image signed and attested with its SLSA provenance and SBOMs
# (scripts/release.sh; docs/development.md, Releases).
release:
	bash scripts/release.sh

# Verifies dist/ offline with cosign and the public key COSIGN_PUB: the
# signature of SHA256SUMS, every file against it, the image's signature
# and its provenance and SBOM attestations (scripts/verify-release.sh).
COSIGN_PUB ?= cosign.pub
verify-release:
	COSIGN_PUB=$(COSIGN_PUB) bash scripts/verify-release.sh dist

# The long chaos run, after a re-emit request crashed at every crash point
# (TestReemit -reemit.all): a fleet (CHAOS_FLEET) of eight streams (eight
# databases) in three walstream processes that all run one config and share
# the streams through their fleet's Kafka group, on one Apache Kafka 4.x
# node and one checkpoint topic; its processes killed (also at their crash
# points), paused past and within the group's session timeout, stopped and
# started again, restarted in turn as a rollout does; re-emit requests,
# Postgres and the broker restarted and the network cut for CHAOS_DURATION
# under load, then every row of every stream checked. CHAOS_FLEET= runs the
# streams in processes of their own instead, with the faults of one
# stream's process (paused mid-commit, a zombie, another producer's
# transaction left open on the checkpoint topic, a recreated outbox).
# CHAOS_MIN_ROWS counts the rows of all streams. `make test` runs a short
# variant of both. CHAOS_FLAGS adds flags, e.g. CHAOS_FLAGS=-chaos.skip=broker-restart-sigkill,
# or CHAOS_FLAGS=-chaos.broker=devbroker for the local broker (kfake).
CHAOS_DURATION ?= 10m
CHAOS_MIN_ROWS ?= 200000
CHAOS_REPORT   ?= $(CURDIR)/chaos/chaos-report.json
CHAOS_FLEET    ?= -chaos.fleet=3 -chaos.streams=8
CHAOS_FLAGS    ?=
chaos:
	$(DEPS) chaos
	$(GO) test ./cmd/walstream -run '^TestReemit$$' -race -count=1 -timeout 20m -v -args -reemit.all
	$(GO) test ./chaos -run TestChaos -count=1 -timeout 40m -v -args \
		-chaos.duration=$(CHAOS_DURATION) -chaos.min-rows=$(CHAOS_MIN_ROWS) -chaos.report=$(CHAOS_REPORT) $(CHAOS_FLEET) $(CHAOS_FLAGS)

# The same on a Kafka cluster of three brokers (and two controller-only
# nodes), with the cluster's faults: the transaction coordinator (of a
# stream's transactional id, and so of the fleet's group at times), a
# partition leader, the checkpoint topic's leader and the active controller
# killed, two brokers down, one cut off; and the fleet's. First the
# harness's own test of a three-node cluster (start, restarts, data kept),
# which make test leaves out.
CHAOS_CLUSTER_REPORT ?= $(CURDIR)/chaos/chaos-cluster-report.json
chaos-cluster:
	$(DEPS) chaos
	$(GO) test ./internal/testenv -run 'TestKafka$$' -count=1 -v -args -testenv.kafka-cluster
	$(GO) test ./chaos -run TestChaos -count=1 -timeout 40m -v -args -chaos.kafka-nodes=3 \
		-chaos.duration=$(CHAOS_DURATION) -chaos.min-rows=$(CHAOS_MIN_ROWS) -chaos.report=$(CHAOS_CLUSTER_REPORT) $(CHAOS_FLEET) $(CHAOS_FLAGS)

# Debezium 3.6.1 (in Kafka Connect) and walstream on the whole
# compatibility corpus, each record compared byte for byte (compat/), the
# shadow-mode diff, every cutover case once, and a re-emit beside
# Debezium's incremental snapshot; `make test` runs a few. COMPAT_FLAGS adds flags, e.g.
# COMPAT_FLAGS="-compat.mode=distributed -compat.dump=$(CURDIR)/compat/records".
COMPAT_FLAGS ?=
compat:
	$(DEPS) compat
	$(GO) test ./compat -run 'TestCompat|TestCutover|TestShadowDiff|TestReemitBesideDebezium' -race -count=1 -timeout 60m -v -args -compat.all $(COMPAT_FLAGS)

# The cutover from Debezium (docs/debezium.md): Debezium under load,
# stopped or killed at a random moment, in each Kafka Connect mode, and
# walstream taking over its slot (and, in two cases, the way back to Debezium
# and a second cutover), CUTOVER_RUNS times each; every row must
# be in Kafka once, besides Debezium's own duplicates, which are counted.
# `make test` runs two of the cases once.
CUTOVER_RUNS ?= 3
cutover:
	$(DEPS) compat
	$(GO) test ./compat -run 'TestCutover' -race -count=1 -timeout 60m -v -args -compat.all -cutover.runs=$(CUTOVER_RUNS)

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./decode ./publish/...

# The end-to-end benchmark (docs/benchmarks.md): its own Postgres 15 and broker,
# pg_recvlogical as the ceiling, walstream built from this tree. Results go
# to bench/results/ (walbench.json, walbench.md, logs, profiles).
# BENCH_FLAGS=-profile adds a profiled run; -h lists the flags.
BENCH_FLAGS ?=
bench-e2e:
	$(DEPS) bench
	$(GO) run ./cmd/walbench -out $(CURDIR)/bench/results $(BENCH_FLAGS)

# walstream's profile for profile-guided optimization, which go build
# applies to every build of walstream: its CPU profile over a backlog drain,
# a huge transaction and two live loads, taken by walbench (docs/benchmarks.md).
pgo:
	$(DEPS) bench
	$(GO) run ./cmd/walbench -out $(CURDIR)/bench/pgo -pgo $(CURDIR)/cmd/walstream/default.pgo \
		-scenarios backlog,huge,latency -runs 1 -rows 500000 -huge-runs 1 -huge-rows 500000 \
		-latency-runs 1 -latency-loads 1000x1,10000x10 -latency-duration 20s -max-load 1 -quiet-timeout 1m

# The decoder, the streams of in-progress transactions in front of it, and
# the reader of a standalone Kafka Connect worker's offsets file.
fuzz:
	$(GO) test ./decode -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME)
	$(GO) test ./decode -run '^$$' -fuzz FuzzStreams -fuzztime $(FUZZTIME)
	$(GO) test ./debezium -run '^$$' -fuzz FuzzOffsetsFile -fuzztime $(FUZZTIME)

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
	$(GO) vet -C tools ./...
	cd tools && $(GO) run $(STATICCHECK) ./...
