# pbfs build, test and benchmark entry points.
GO      ?= go
BIN     ?= bin/pbfs
FUZZTIME ?= 30s

.PHONY: build test test-race test-short fuzz proto bench bench-quick bench-kv bench-wordpress bench-sysbench demo vet fmt clean install

PREFIX  ?= /usr/local
SBINDIR ?= /sbin
DESTDIR ?=
VERSION ?= $(shell git describe --always --dirty 2>/dev/null || echo unknown)

build:
	$(GO) build -ldflags "-X main.version=$(VERSION)" -o $(BIN) ./cmd/pbfs
	$(GO) build -o bin/http-proxy ./plugins/http-proxy
	$(GO) build -o bin/example ./plugins/example
	$(GO) build -o bin/mysql-hint ./plugins/mysql-hint
	$(GO) build -o bin/sqlite-hint ./plugins/sqlite-hint

# The full suite: real FUSE mounts, real processes. Needs root and /dev/fuse.
# The tests build with the failpoints (-tags failpoints), as the daemons
# they start are; make build's binaries have none.
test: vet
	$(GO) test -tags failpoints -count=1 -timeout 20m ./...

# The suite with the race detector, in the tests and in the pbfs processes
# they start (a race in the daemon fails the test that stops it).
test-race:
	$(GO) test -tags failpoints -race -count=1 -timeout 30m ./...

test-short:
	$(GO) test -tags failpoints -count=1 -short ./...

vet:
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { gofmt -l $$(git ls-files '*.go'); echo 'gofmt needed'; exit 1; }
	$(GO) vet ./...
	$(GO) vet -tags failpoints ./fs ./journal ./replicate/...

# Every fuzz target in turn, FUZZTIME each.
fuzz:
	$(GO) test ./journal -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME)
	$(GO) test ./journal -run '^$$' -fuzz '^FuzzParseBody$$' -fuzztime $(FUZZTIME)
	$(GO) test ./journal -run '^$$' -fuzz '^FuzzDataLog$$' -fuzztime $(FUZZTIME)
	$(GO) test ./journal -run '^$$' -fuzz '^FuzzScanSegment$$' -fuzztime $(FUZZTIME)
	$(GO) test ./replicate -run '^$$' -fuzz '^FuzzPrimaryMsg$$' -fuzztime $(FUZZTIME)
	$(GO) test ./replicate -run '^$$' -fuzz '^FuzzResyncMsg$$' -fuzztime $(FUZZTIME)
	$(GO) test ./replicate/wire -run '^$$' -fuzz '^FuzzRawFrames$$' -fuzztime $(FUZZTIME)
	$(GO) test ./plugins/sdk/host -run '^$$' -fuzz '^FuzzParseSpecs$$' -fuzztime $(FUZZTIME)
	$(GO) test ./plugins/http-proxy/proxy -run '^$$' -fuzz '^FuzzConfig$$' -fuzztime $(FUZZTIME)
	$(GO) test ./plugins/mysql-hint -run '^$$' -fuzz '^FuzzReadOptions$$' -fuzztime $(FUZZTIME)
	$(GO) test ./plugins/sdk -run '^$$' -fuzz '^FuzzMatch$$' -fuzztime $(FUZZTIME)
	$(GO) test ./plugins/sdk/internal/wire -run '^$$' -fuzz '^FuzzLinePackets$$' -fuzztime $(FUZZTIME)
	$(GO) test ./internal/procs -run '^$$' -fuzz '^FuzzParseCPUs$$' -fuzztime $(FUZZTIME)

# Regenerate the gRPC code from the published .proto files.
proto:
	protoc --go_out=. --go_opt=paths=source_relative --go-grpc_out=. --go-grpc_opt=paths=source_relative \
		replicate/replpb/replicate.proto plugins/sdk/internal/pluginpb/plugin.proto

bench: build
	$(GO) test -run '^$$' -bench . -benchtime 20000x ./capture
	$(GO) test -run '^$$' -bench . -benchtime 2000x ./journal ./benchmarks/writediff
	$(GO) run ./benchmarks/suite -install -bin $(BIN) -proxy bin/http-proxy

# Short versions of the suite's benchmarks (fs, replicate, http, kv, wordpress, sysbench), one
# report with summary.json, in under five minutes.
bench-quick: build
	$(GO) run ./benchmarks/suite -install -quick -bin $(BIN) -proxy bin/http-proxy

# WordPress wp.editPost on Debian's wordpress, nginx, php-fpm and MariaDB: plain against pbfs
# with 0-2 backups behind the proxy (about 12 minutes; WP_FLAGS=-quick for about 5). Installs
# the packages it needs with apt-get.
bench-wordpress: build
	$(GO) run ./benchmarks/wordpress -install -bin $(BIN) -proxy bin/http-proxy $(WP_FLAGS)

# The key-value stress of the Voldemort seed, plain against pbfs with 0-2 backups, and
# once under a lowered descriptor limit (about 2 minutes with KV_FLAGS=-quick).
bench-kv: build
	$(GO) run ./benchmarks/kv -bin $(BIN) -proxy bin/http-proxy $(KV_FLAGS)

# MariaDB under sysbench: plain, pbfs, pbfs replicating to one and two backups, semi-sync (about 12 minutes;
# SYSBENCH_FLAGS=-quick for about 5). Needs mariadb-server and sysbench.
bench-sysbench:
	$(GO) run ./benchmarks/sysbench $(SYSBENCH_FLAGS)

# A primary and a backup over a scratch volume: write, barrier, compare the copies, verify the journal.
demo: build
	bash scripts/demo.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

# pbfs and its plugins under PREFIX, mount(8)'s helper for type fuse.pbfs
# (a link to pbfs in SBINDIR, where mount looks, whatever PREFIX is), the
# sample configuration and the systemd units (docs/CONTAINERS.md); an
# existing configuration is kept.
install: build
	install -D -m 0755 $(BIN) $(DESTDIR)$(PREFIX)/bin/pbfs
	install -d $(DESTDIR)$(SBINDIR)
	ln -sf $(PREFIX)/bin/pbfs $(DESTDIR)$(SBINDIR)/mount.fuse.pbfs
	for p in http-proxy mysql-hint sqlite-hint example; do install -D -m 0755 bin/$$p $(DESTDIR)$(PREFIX)/lib/pbfs/$$p; done
	install -D -m 0644 etc/pbfs.yaml $(DESTDIR)/etc/pbfs/pbfs.yaml.sample
	install -D -m 0644 etc/systemd/pbfs-primary.service $(DESTDIR)/etc/systemd/system/pbfs-primary.service
	install -D -m 0644 etc/systemd/pbfs-backup.service $(DESTDIR)/etc/systemd/system/pbfs-backup.service
	install -D -m 0644 etc/systemd/pbfs-volume-driver.service $(DESTDIR)/etc/systemd/system/pbfs-volume-driver.service
	install -D -m 0644 etc/volume-driver.yaml $(DESTDIR)/etc/pbfs/volume-driver.yaml.sample
	install -D -m 0644 etc/prometheus/pbfs-alerts.yml $(DESTDIR)/etc/pbfs/pbfs-alerts.yml.sample
	install -d $(DESTDIR)$(PREFIX)/share/man/man8 $(DESTDIR)/etc/bash_completion.d
	$(BIN) man > $(DESTDIR)$(PREFIX)/share/man/man8/pbfs.8
	$(BIN) completion bash > $(DESTDIR)/etc/bash_completion.d/pbfs

clean:
	rm -rf bin
