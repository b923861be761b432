# pbfs build, test and benchmark entry points.
GO      ?= go
BIN     ?= bin/pbfs
FUZZTIME ?= 30s

.PHONY: build test test-race test-short fuzz proto bench demo vet fmt clean

build:
	$(GO) build -o $(BIN) ./cmd/pbfs
	$(GO) build -o bin/http-proxy ./plugins/http-proxy
	$(GO) build -o bin/example ./plugins/example
	$(GO) build -o bin/mysql-hint ./plugins/mysql-hint
	$(GO) build -o bin/sqlite-hint ./plugins/sqlite-hint

# The full suite: real FUSE mounts, real processes. Needs root and /dev/fuse.
test: vet
	$(GO) test -count=1 -timeout 20m ./...

# The suite with the race detector, in the tests and in the pbfs processes
# they start (a race in the daemon fails the test that stops it).
test-race:
	$(GO) test -race -count=1 -timeout 30m ./...

test-short:
	$(GO) test -count=1 -short ./...

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo 'gofmt needed'; exit 1; }
	$(GO) vet ./...

# Every fuzz target in turn, FUZZTIME each.
fuzz:
	$(GO) test ./journal -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./journal -run '^$$' -fuzz '^FuzzParseBody$$' -fuzztime $(FUZZTIME)
	$(GO) test ./journal -run '^$$' -fuzz '^FuzzDataLog$$' -fuzztime $(FUZZTIME)
	$(GO) test ./replicate -run '^$$' -fuzz '^FuzzPrimaryMsg$$' -fuzztime $(FUZZTIME)
	$(GO) test ./replicate -run '^$$' -fuzz '^FuzzResyncMsg$$' -fuzztime $(FUZZTIME)
	$(GO) test ./plugins/sdk/host -run '^$$' -fuzz '^FuzzParseSpecs$$' -fuzztime $(FUZZTIME)
	$(GO) test ./plugins/http-proxy/proxy -run '^$$' -fuzz '^FuzzConfig$$' -fuzztime $(FUZZTIME)
	$(GO) test ./plugins/mysql-hint -run '^$$' -fuzz '^FuzzReadOptions$$' -fuzztime $(FUZZTIME)
	$(GO) test ./plugins/sdk -run '^$$' -fuzz '^FuzzMatch$$' -fuzztime $(FUZZTIME)

# Regenerate the gRPC code from the published .proto files.
proto:
	protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative \
		replicate/replpb/replicate.proto plugins/sdk/internal/pluginpb/plugin.proto

bench: build
	bash benchmarks/fs/run.sh
	$(GO) test -run '^$$' -bench . -benchtime 20000x ./capture
	$(GO) test -run '^$$' -bench . -benchtime 2000x ./journal ./benchmarks/writediff
	$(GO) run ./benchmarks/replicate -bin $(BIN)
	$(GO) run ./benchmarks/http -bin $(BIN) -proxy bin/http-proxy

# A primary over a scratch volume: write, barrier, replay onto a copy, compare.
demo: build
	bash scripts/demo.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf bin
