package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/dockertest"
)

// TestContainerFailover is docs/CONTAINERS.md's failover walk-through on
// a real Docker engine: every node has its service's container, created
// over the node's volume, which the node's --on-promote starts and its
// --on-demote stops. The service writes files, each fsynced (--fsync
// replicated: the fsync returns once the backups hold it) before it is
// entered in a ledger. The primary's machine is lost (its node killed
// with -9, its container killed); the node that takes over starts its own
// container, which finds every file in the old one's ledger and goes on
// writing.
func TestContainerFailover(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a Docker engine and three nodes (about a minute)")
	}
	e := dockertest.Start(t)
	ledgers := t.TempDir()
	c := startNodesWith(t, 1, 3, func(nd *node) []string {
		ledger := filepath.Join(ledgers, nd.name)
		must(t, os.MkdirAll(ledger, 0o755))
		// Created now, started by the hook: the bind mount resolves at
		// start, over the node's pbfs mount.
		docker(t, e, "create", "--name", "svc-"+nd.name, "--network", "none", "-v", nd.vol+":/data", "-v", ledger+":/ledger", dockertest.Image,
			"sh", "-c", "i=0; while :; do i=$((i+1)); echo $HOSTNAME-$i > /data/"+nd.name+"-$i; sync /data/"+nd.name+"-$i && echo $i >> /ledger/acked; done")
		return []string{"--fsync", "replicated",
			"--on-promote", e.Shell("start", "svc-"+nd.name),
			"--on-demote", e.Shell("stop", "-t", "1", "svc-"+nd.name)}
	})
	primary, _ := c.leader(60 * time.Second)
	acked := func(nd *node) []string { return readLedger(t, filepath.Join(ledgers, nd.name)) }
	waitFor(t, "20 writes the first primary's service had acknowledged", func() bool { return len(acked(primary)) >= 20 })
	// The machine is lost: the node and the service with it.
	c.kill(primary)
	docker(t, e, "kill", "svc-"+primary.name)
	lost := acked(primary)
	next, _ := c.leader(60 * time.Second)
	if next == primary {
		t.Fatal("the killed node is still the leader")
	}
	// The hook runs once the new primary's mount serves.
	waitFor(t, "the new primary's service started by its hook", func() bool {
		return docker(t, e, "inspect", "-f", "{{.State.Running}}", "svc-"+next.name) == "true"
	})
	waitFor(t, "writes the new primary's service acknowledged", func() bool { return len(acked(next)) >= 10 })
	for _, i := range lost {
		path := filepath.Join(next.vol, primary.name+"-"+i)
		got, err := os.ReadFile(path)
		if err != nil || !strings.HasSuffix(string(got), "-"+i+"\n") {
			t.Fatalf("%s, acknowledged by the lost primary's service, is not on the new primary: %q %v (%d acknowledged)", filepath.Base(path), got, err, len(lost))
		}
	}
	t.Logf("%d writes the lost service acknowledged are on %s, whose service took over", len(lost), next.name)
	// Stepping down stops the service before the mount goes.
	docker(t, e, "kill", "svc-"+next.name)
}
