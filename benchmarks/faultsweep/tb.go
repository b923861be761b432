package main

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
)

// programTB lets the program use the tests' helpers (internal/etcdtest,
// internal/fstest), which report through testing.TB: a Fatal ends the
// sweep (run returns it), Cleanup functions run at the end, TempDir is
// under the run's directory, which is kept when the sweep fails.
type programTB struct {
	testing.TB // nil: satisfies the interface's unexported method; never called
	dir        string
	mu         sync.Mutex
	cleanups   []func()
	failed     bool
	temps      int
}

// fatal is what Fatal panics with, for run to recover.
type fatal struct{ msg string }

func (t *programTB) Helper()                    {}
func (t *programTB) Name() string               { return "faultsweep" }
func (t *programTB) Context() context.Context   { return context.Background() }
func (t *programTB) Log(args ...any)            { fmt.Fprintln(os.Stderr, args...) }
func (t *programTB) Logf(f string, args ...any) { fmt.Fprintf(os.Stderr, f+"\n", args...) }
func (t *programTB) Fatal(args ...any)          { panic(fatal{fmt.Sprint(args...)}) }
func (t *programTB) Fatalf(f string, args ...any) {
	panic(fatal{fmt.Sprintf(f, args...)})
}
func (t *programTB) FailNow()                    { panic(fatal{"failed"}) }
func (t *programTB) Skip(args ...any)            { t.Fatal(args...) }
func (t *programTB) Skipf(f string, args ...any) { t.Fatalf(f, args...) }
func (t *programTB) SkipNow()                    { t.FailNow() }
func (t *programTB) Skipped() bool               { return false }

func (t *programTB) Error(args ...any) {
	t.Log(args...)
	t.mu.Lock()
	t.failed = true
	t.mu.Unlock()
}

func (t *programTB) Errorf(f string, args ...any) { t.Error(fmt.Sprintf(f, args...)) }
func (t *programTB) Fail()                        { t.Error("failed") }

func (t *programTB) Failed() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.failed
}

func (t *programTB) Cleanup(f func()) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.cleanups = append(t.cleanups, f)
}

// TempDir is a new directory under the run's directory.
func (t *programTB) TempDir() string {
	t.mu.Lock()
	t.temps++
	n := t.temps
	t.mu.Unlock()
	dir := fmt.Sprintf("%s/tmp%d", t.dir, n)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("temp dir: %v", err)
	}
	return dir
}

// run calls f and turns a Fatal into an error.
func (t *programTB) run(f func()) (err error) {
	defer func() {
		if r := recover(); r != nil {
			ft, ok := r.(fatal)
			if !ok {
				panic(r)
			}
			err = fmt.Errorf("%s", ft.msg)
		}
	}()
	f()
	return nil
}

// cleanup runs the Cleanup functions, newest first.
func (t *programTB) cleanup() {
	for {
		t.mu.Lock()
		if len(t.cleanups) == 0 {
			t.mu.Unlock()
			return
		}
		f := t.cleanups[len(t.cleanups)-1]
		t.cleanups = t.cleanups[:len(t.cleanups)-1]
		t.mu.Unlock()
		t.run(f)
	}
}
