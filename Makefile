# walstream: `make demo` runs the whole product locally, `make test` runs every test.
GO       ?= go
VERSION  ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
FUZZTIME ?= 60s
STATICCHECK ?= honnef.co/go/tools/cmd/staticcheck@v0.8.2

.PHONY: build deps test demo bench fuzz lint

build:
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/walstream ./cmd/walstream
	$(GO) build -o bin/devbroker ./cmd/devbroker

# Postgres 15 and kcat from Debian, when missing and run as root.
deps:
	bash scripts/deps.sh

# Unit and integration tests, with the race detector. Integration tests start
# their own Postgres 15 and broker; with CI set they fail if those cannot start.
test: deps
	$(GO) test -race -count=1 -timeout 20m ./...

demo: deps
	bash scripts/demo.sh

bench:
	$(GO) test -run '^$$' -bench . -benchmem ./decode ./publish

fuzz:
	$(GO) test ./decode -run '^$$' -fuzz FuzzDecode -fuzztime $(FUZZTIME)

lint:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); exit 1; }
	$(GO) vet ./...
	$(GO) run $(STATICCHECK) ./...
