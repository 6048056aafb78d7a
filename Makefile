# stampede: the two commands a new user needs are `make demo` and `make test`.
GO       ?= go
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)

.PHONY: build demo test browser-test test-deps lint bench bench-table bench-screen bench-deps fuzz man clean

build:
	$(GO) build -ldflags '$(LDFLAGS)' -o bin/stampede ./cmd/stampede

# The main job: a flash crowd on loopback, absorbed by the swarm, side by side
# with plain HTTP from the same capped origin (about two minutes, no root).
demo: build
	./bin/stampede demo

# What CI runs (.ci/run calls it): as root, installs what the tests run
# (scripts/install-test-deps.sh), then vet, race-enabled shuffled tests, and
# every benchmark once so they keep compiling.
test:
	./scripts/test.sh

# The browser peer's tests (webpeer, docs/browser.md): visitors' headless
# Chromium in network namespaces of their own trading an object over WebRTC,
# as root (scripts/test.sh runs it then); it installs what they need first.
browser-test:
	./scripts/install-test-deps.sh --if-root
	STAMPEDETEST_BROWSER=1 $(GO) test -count=1 -run 'TestBrowser|TestJavaScript' -v ./webpeer

# The Debian packages the tests and the benchmarks run besides stampede
# (root). The stampede binary installs nothing.
test-deps:
	./scripts/install-test-deps.sh

bench-deps:
	./scripts/install-bench-deps.sh

lint:
	$(GO) vet ./...
	$(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./...
	test -z "$$(gofmt -l .)"

# Throughput and memory figures, and the testbed's standard scenarios
# (bench/scenarios: stampede, plain HTTP and aria2 side by side), reported in
# docs/benchmarks.md. As root it first installs the baselines' programs
# (scripts/install-bench-deps.sh); without root, the netns scenarios
# (flash20, flash50) and the systems whose programs are missing are left out
# with a note; see docs/testbed.md. Reports go to bench/out.
BENCH_SCENARIOS ?= ci faults staggered poisson pool flash20 flash50
bench: build
	./scripts/install-bench-deps.sh --if-root
	$(GO) test -run='^$$' -bench=. -benchtime=3x ./manifest
	./scripts/bench-get.sh
	./scripts/bench-gateway.sh
	./bin/stampede bench --skip-unavailable --out bench/out --doc docs/benchmarks.md $(BENCH_SCENARIOS)

# Issue 30's table: every kind of crowd (mixed links, ADSL uplinks, a fast
# origin, a big file, a tiny object, churn, flash50), stampede and aria2 side
# by side, 3 runs each (tiny also against plain HTTP): about an hour on 2
# cores. Tables into docs/benchmarks.md.
BENCH_TABLE ?= mixed adsl fast-origin big tiny churn
bench-table: build
	./scripts/install-bench-deps.sh --if-root
	./bin/stampede bench --skip-unavailable --out bench/out --doc docs/benchmarks.md $(BENCH_TABLE)
	./bin/stampede bench --skip-unavailable --systems stampede,aria2 --out bench/out --doc docs/benchmarks.md flash50

# A screening subset of the table for trying ideas: stampede alone, one run
# of each crowd but the big file, a few minutes. Nothing is written to the
# docs; reports go to bench/out/screen.
BENCH_SCREEN ?= mixed adsl fast-origin tiny churn flash50
bench-screen: build
	./bin/stampede bench --skip-unavailable --systems stampede --reps 1 --out bench/out/screen $(BENCH_SCREEN)

# The manual page, generated from the help: commit it with the change to the
# help (TestManPage fails while docs/stampede.1 differs). Read it with
# man -l docs/stampede.1.
man: build
	./bin/stampede help --man > docs/stampede.1

# Every native fuzz target (func Fuzz... in a _test.go file), one at a time,
# each in its own package (two packages may name a target alike), for
# FUZZTIME. FUZZ narrows them to names matching a regexp (make fuzz
# FUZZ=Head), FUZZFLAGS adds go test flags (-parallel=1 for one worker).
# Every target runs even when one fails; the failures are listed at the end.
FUZZTIME  ?= 30s
FUZZ      ?= .
FUZZFLAGS ?=
fuzz:
	@failed=; \
	for t in $$(grep -ro --include='*_test.go' '^func Fuzz[A-Za-z0-9_]*' . | sed 's|/[^/]*:func |:|' | sort -u | grep -E ':Fuzz.*($(FUZZ))'); do \
		pkg=$${t%%:*}; f=$${t#*:}; \
		echo "== $$pkg $$f"; \
		$(GO) test -run='^$$' -fuzz="^$$f\$$" -fuzztime=$(FUZZTIME) $(FUZZFLAGS) $$pkg || failed="$$failed $$pkg:$$f"; \
	done; \
	if [ -n "$$failed" ]; then echo "fuzz: failed:$$failed"; exit 1; fi

clean:
	rm -rf bin
