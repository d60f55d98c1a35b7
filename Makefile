# Coral — see README.md. `make demo` runs a local network, `make test` runs
# every check CI runs.
GO       ?= go
FUZZTIME ?= 30s

.PHONY: all build demo test fmt-check vet lint tidy-check unit fuzz eval clean

all: build

build:
	$(GO) build ./...

# A real local Coral DSHT on 127.0.0.x UDP sockets, showing put, get and
# put+get with their routing.
demo:
	$(GO) run ./cmd/dhtdemo

# Everything: formatting, vet, staticcheck (pinned in go.mod), go.mod drift,
# and all tests under the race detector.
test: fmt-check vet lint tidy-check unit

fmt-check:
	@out=$$(gofmt -l .); if [ -n "$$out" ]; then echo "gofmt would change:"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

lint:
	$(GO) tool staticcheck ./...

tidy-check:
	$(GO) mod tidy -diff

unit:
	$(GO) test -race -count=1 ./...

# Run every native fuzz target for FUZZTIME each.
fuzz:
	for target in FuzzDecodeMessage FuzzParseKeyText FuzzHandleDatagram FuzzParseTimeExceeded; do \
		$(GO) test -run=NONE -fuzz="^$$target\$$" -fuzztime=$(FUZZTIME) ./coraldht || exit 1; \
	done

# The experiments behind docs/evaluation.md (several minutes).
eval:
	$(GO) run ./eval/hotspot -sweep "128 256 512 1024 2048"
	$(GO) run ./eval/lookup
	$(GO) run ./eval/clusters
	$(GO) run ./eval/getlatency

clean:
	rm -rf bin
