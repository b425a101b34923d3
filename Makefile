# webhookd — build, run and check targets. .ci/run exercises them all but soak,
# bench and bench-baseline, which take too long for CI (it runs bench-smoke, the
# same load tool on a small load); build and bench-tool run within bench-smoke,
# run within scripts/smoke.sh, generate within check-generated.

# Go lives in /usr/local/go/bin on our machines; a go already on PATH wins.
export PATH := $(PATH):/usr/local/go/bin

GO        ?= go
BIN       ?= bin/webhookd
BENCHTIME ?= 1s
TEST_FLAGS ?=
# make fuzz: how long each fuzz target runs, and how many workers each uses
# (the machine is shared: one by default). go test -fuzz takes one target
# per run, so the targets are listed here, as package:Target; a new fuzz
# target must be added to this list.
FUZZTIME     ?= 1m
FUZZPARALLEL ?= 1
FUZZ_TARGETS ?= ./api:FuzzEvents ./api:FuzzEventBatch ./api:FuzzEndpointCreate ./api:FuzzEndpointPatch \
	./api:FuzzLists ./api:FuzzRedeliver ./api:FuzzReplay ./api:FuzzSecret ./api:FuzzRoutes ./api:FuzzParseEvent \
	./dispatcher:FuzzParseRetryAfter ./filter:FuzzFilter ./filter:FuzzScan ./transform:FuzzTransform
# The load tool (cmd/webhookd-bench) and the sizes of make bench-smoke's run:
# small enough for CI on 2 cores; make bench uses the tool's full defaults.
BENCH_TOOL        ?= bin/webhookd-bench
BENCH_SMOKE_FLAGS ?= -runs 1 -ceiling-tasks 5000 -burst-events 1000 -slow-deliveries 2000 \
	-noisy-duration 5s -steady-duration 5s -scheduled-count 20000 -ingest-events 2000 -redis-down-events 500 \
	-ingest-batch-events 10000 -one-slow-events 2000 -capacity-events 1500 -kill-in-flight 60 -kill-rate 50 -flush-duration 4s -many-endpoints 2000 -fifo-events 300 \
	-rest-endpoints 100 -rest-deliveries 5000 -rest-duration 5s -stall-timeout 10s -max-wait 1m
# make bench BASELINE=bin/webhookd-base (or bench-smoke) also measures that
# binary, alternately with $(BIN) in the same session, and reports both and
# their ratio; make bench-baseline REV=<revision> builds it.
BASELINE     ?=
BASELINE_BIN ?= bin/webhookd-base
REV          ?=
BENCH_AB      = $(if $(BASELINE), -baseline $(BASELINE))
# templ is used only once go.mod declares it as a tool
# (go get -tool github.com/a-h/templ/cmd/templ@v0.3.1100).
TEMPL_TOOL := github.com/a-h/templ/cmd/templ

.DEFAULT_GOAL := build

.PHONY: build run test test-sdks licences soak fuzz bench bench-go bench-smoke bench-tool bench-baseline generate check-generated vet fmt-check chaos chaos-smoke

## build: compile the webhookd binary into bin/
build:
	$(GO) build -o $(BIN) ./cmd/webhookd

## run: start webhookd locally (throwaway PostgreSQL/Redis if none are reachable)
run:
	bash scripts/run.sh

## test: all tests, with the race detector (scripts/test.sh: throwaway
## PostgreSQL/Redis when none answer at the test URLs; TEST_FLAGS are passed
## to go test, e.g. make test TEST_FLAGS='-run TestX')
test:
	bash scripts/test.sh $(TEST_FLAGS)

## test-sdks: the Node, Python and PHP SDKs' tests (sdks/*), each running
## the conformance scenario sdks/conformance/cases.json against a real API on
## its own PostgreSQL schema and Redis database, behind the fault proxy
## (cmd/webhookd-conformance); needs node/npm, python3, php, phpunit
test-sdks:
	@test -d sdks/node/node_modules || (cd sdks/node && npm ci --no-audit --no-fund)
	$(GO) build -o bin/webhookd-conformance ./cmd/webhookd-conformance
	bin/webhookd-conformance -cases sdks/conformance/cases.json -- sh -ec '\
		echo "== sdks/node: npm test"; (cd sdks/node && npm test); \
		echo "== sdks/python: python3 -m unittest"; (cd sdks/python && python3 -m unittest -v); \
		echo "== sdks/php: phpunit"; (cd sdks/php && phpunit)'

## licences: list the licence of every Go module the build, tests and tools
## use and of every npm package the Node SDK is built with, and fail on one
## not compatible with Apache-2.0 (internal/licences; make test runs it too)
licences:
	$(GO) test -count=1 -run '^TestDependencyLicences$$' -v ./internal/licences

## soak: the fault drills of cmd/webhookd again and again (SOAK_COUNT times,
## default 10; about 2 minutes a round, the rounds one after another)
SOAK_COUNT ?= 10
SOAK_DRILLS := Test(PostgresRestarted|RedisRestarted|RedisLost|SIGTERM|TwoWorkers|WorkerKilled|ReceiverFlapping|RedisSentinel|DeliversThroughRedis)
soak:
	TEST_PKGS=./cmd/webhookd bash scripts/test.sh -run '$(SOAK_DRILLS)' -count=$(SOAK_COUNT) -v $(TEST_FLAGS)

## fuzz: every fuzz target for FUZZTIME (default 1m) each; a failing input is
## written to the package's testdata/fuzz/<Target>/ — commit it with the fix,
## and plain go test replays it from then on
## Each package's test binary is built once (go test -c -fuzz) and run for
## each of its targets, as go test -fuzz would run it (in the package's
## directory, with go test's fuzz cache): building it for every target took
## most of the time on a slow machine.
fuzz:
	@set -e; bin=$$(mktemp -d); trap 'rm -rf "$$bin"' EXIT; cache=$$($(GO) env GOCACHE)/fuzz; \
	for t in $(FUZZ_TARGETS); do \
		pkg=$${t%%:*}; name=$${t#*:}; path=$$($(GO) list $$pkg); exe=$$bin/$$(echo $$path | tr / _).test; \
		[ -x $$exe ] || $(GO) test -c -fuzz=. -o $$exe $$pkg; \
		echo "fuzz $$pkg $$name for $(FUZZTIME)"; \
		(cd $$pkg && $$exe -test.run='^$$' -test.fuzz="^$$name\$$" -test.fuzztime=$(FUZZTIME) \
			-test.parallel=$(FUZZPARALLEL) -test.fuzzcachedir="$$cache/$$path" \
			-test.timeout=10m -test.paniconexit0); \
	done

## bench: the Go benchmarks, then the load tool against bin/webhookd (every
## scenario 3 times, medians) writing BENCHMARKS.md; about 30 minutes on 2 cores.
## With BASELINE=bin/webhookd-base every scenario run is measured on that
## binary too, alternately with bin/webhookd (about twice as long), and the
## report gives both medians, their ratio, and any figure over 10% worse
bench: bench-go build bench-tool
	$(BENCH_TOOL) -webhookd $(BIN) -runs 3 -out BENCHMARKS.md$(BENCH_AB)

## bench-baseline: build the webhookd of git revision REV into bin/webhookd-base
## (BASELINE_BIN), in a temporary worktree removed afterwards, for
## make bench BASELINE=bin/webhookd-base; e.g. make bench-baseline REV=fc972c5
bench-baseline:
	bash scripts/bench-baseline.sh '$(REV)' '$(BASELINE_BIN)'

## bench-go: the Go benchmarks alone; `make bench-go BENCHTIME=1x` runs each once
bench-go:
	$(GO) test -run='^$$' -bench=. -benchmem -benchtime=$(BENCHTIME) ./...

## bench-smoke: the Go benchmarks once each and a small load run, printed to
## stdout; what CI runs
bench-smoke: build bench-tool
	$(MAKE) --no-print-directory bench-go BENCHTIME=1x
	$(BENCH_TOOL) -webhookd $(BIN) $(BENCH_SMOKE_FLAGS) -out -$(BENCH_AB)

## chaos: the chaos soak (webhookd-bench chaos): 2 serve and 2 worker processes
## on a throwaway PostgreSQL and Redis behind toxiproxy, load through the Go
## client, outbox rows and bulk jobs, every kind of fault on a seeded
## schedule, then the ledger of every event; writes RELIABILITY.md. CHAOS_DURATION (default 3m; a long one:
## make chaos CHAOS_DURATION=30m), CHAOS_SEED (0: a random one, printed)
CHAOS_DURATION ?= 3m
CHAOS_SEED     ?= 0
CHAOS_FLAGS    ?=
chaos: build bench-tool
	$(BENCH_TOOL) chaos -webhookd $(BIN) -duration $(CHAOS_DURATION) -seed $(CHAOS_SEED) -out RELIABILITY.md $(CHAOS_FLAGS)

## chaos-smoke: two short soaks printed to stdout, what CI runs: a fixed seed
## and a random one, 60 s of load and faults each; CHAOS_FLAGS are passed to
## both (e.g. CHAOS_FLAGS='-liveness-bound 15s')
CHAOS_SMOKE_SEED ?= 21
## (both run even when the first fails, so every submission tries a new seed)
chaos-smoke: build bench-tool
	@rc=0; \
	$(BENCH_TOOL) chaos -webhookd $(BIN) -duration 60s -fault-gap 5s -seed $(CHAOS_SMOKE_SEED) -out - $(CHAOS_FLAGS) || rc=1; \
	$(BENCH_TOOL) chaos -webhookd $(BIN) -duration 60s -fault-gap 5s -seed 0 -out - $(CHAOS_FLAGS) || rc=1; \
	exit $$rc

## bench-tool: compile the load tool into bin/
bench-tool:
	$(GO) build -o $(BENCH_TOOL) ./cmd/webhookd-bench

## generate: regenerate *_templ.go (a no-op until go.mod declares templ)
generate:
	@if grep -q '$(TEMPL_TOOL)' go.mod; then \
		echo '$(GO) tool templ generate'; \
		$(GO) tool templ generate; \
	else \
		echo 'generate: templ is not declared as a tool in go.mod; nothing to generate'; \
	fi

## check-generated: fail if the committed *_templ.go files are stale
check-generated: generate
	@changed="$$(git status --porcelain -- '*_templ.go')"; \
	if [ -n "$$changed" ]; then \
		echo 'check-generated: *_templ.go files differ from what `make generate` produces:'; \
		echo "$$changed"; \
		echo 'run `make generate` and commit the result'; \
		exit 1; \
	fi; \
	echo 'check-generated: generated files are up to date'

## vet: go vet
vet:
	$(GO) vet ./...

## fmt-check: fail if any Go file is not gofmt-formatted
fmt-check:
	@unformatted="$$(gofmt -l .)"; \
	if [ -n "$$unformatted" ]; then \
		echo 'fmt-check: these files need gofmt -w:'; \
		echo "$$unformatted"; \
		exit 1; \
	fi; \
	echo 'fmt-check: ok'
