package main

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pbfs/pbfs/plugins/sdk"
	"github.com/pbfs/pbfs/plugins/sdk/sdktest"
)

func TestInfo(t *testing.T) {
	info := sdktest.Serve(t, &Example{}).Info()
	if info.Name != "example" || !info.Serves("frontend") || !info.Serves("hint") || info.Protocol != sdk.ProtocolVersion {
		t.Fatalf("info %+v", info)
	}
}

func TestHeartbeatTakesBarriers(t *testing.T) {
	p := sdktest.Serve(t, &Example{})
	h := sdktest.NewHost()
	h.SetStatus(sdk.Status{Backups: []sdk.Backup{{Addr: "b1", Up: true}}})
	ctx := context.Background()
	if err := p.StartFrontend(ctx, "ex", sdk.Config{"interval": "20ms"}, h); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for h.Barriers() < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d barriers in 5s", h.Barriers())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.StopFrontend(ctx); err != nil {
		t.Fatal(err)
	}
	n := h.Barriers()
	time.Sleep(100 * time.Millisecond)
	if h.Barriers() > n+1 {
		t.Fatalf("barriers went on after Stop: %d -> %d", n, h.Barriers())
	}
}

func TestHeartbeatSurvivesFailingBarriers(t *testing.T) {
	p := sdktest.Serve(t, &Example{})
	h := sdktest.NewHost()
	h.SetErr(errors.New("backup b1 is down"))
	if err := p.StartFrontend(context.Background(), "ex", sdk.Config{"interval": "10ms"}, h); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond)
	h.SetErr(nil)
	before := h.Barriers()
	time.Sleep(100 * time.Millisecond)
	if h.Barriers() <= before {
		t.Fatal("heartbeat stopped after failed barriers")
	}
}

func TestBadConfigRefusedAtStart(t *testing.T) {
	p := sdktest.Serve(t, &Example{})
	err := p.StartFrontend(context.Background(), "ex", sdk.Config{"interval": "soon"}, sdktest.NewHost())
	if err == nil || !strings.Contains(err.Error(), "interval") {
		t.Fatalf("err %v", err)
	}
}

func TestHintRules(t *testing.T) {
	p := sdktest.Serve(t, &Example{})
	ctx := context.Background()
	rules, err := p.Rules(ctx, "ex", "/vol", sdk.Config{"local": "tmp/|*.pid", "both": "log/redo*"})
	if err != nil {
		t.Fatal(err)
	}
	if len(rules) != 3 {
		t.Fatalf("rules %+v", rules)
	}
	hints, err := p.Classify(ctx, []string{"tmp/a/b", "mysqld.pid", "log/redo.0", "data/t1.ibd", "tmp"})
	if err != nil {
		t.Fatal(err)
	}
	want := []sdk.PathHint{
		{LocalOnly: true}, {LocalOnly: true}, {Fsync: sdk.FsyncBoth}, {}, {},
	}
	for i, h := range hints {
		if h.LocalOnly != want[i].LocalOnly || h.Fsync != want[i].Fsync {
			t.Errorf("path %d: hint %+v, want %+v", i, h, want[i])
		}
	}
	if _, err := p.Rules(ctx, "ex", "/vol", sdk.Config{"local": "../etc"}); err == nil {
		t.Fatal("a pattern outside the volume was accepted")
	}
}
