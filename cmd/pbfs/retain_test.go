package main

import (
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
)

// --retain 0 keeps everything on a backup, as on a mount: it meant 10
// minutes on a backup, and an operator who copied the mount's setting got
// trimming. The backup says what it keeps.
func TestBackupRetainZeroKeepsEverything(t *testing.T) {
	for _, tc := range []struct {
		args []string
		says string
	}{
		{nil, "retain=10m0s"},
		{[]string{"--retain", "0"}, "retain=everything"},
		{[]string{"--retain", "-1s"}, "retain=everything"},
		{[]string{"--retain", "1h"}, "retain=1h0m0s"},
	} {
		args := append([]string{"backup", "--listen", fstest.FreeAddr(t), "--token", fstest.TestToken, "--journal", t.TempDir()}, tc.args...)
		cmd := exec.Command(fstest.Binary(t), append(args, t.TempDir())...)
		out := &fstest.Buffer{}
		cmd.Stdout, cmd.Stderr = out, out
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		for deadline := time.Now().Add(20 * time.Second); !strings.Contains(out.String(), "backup serving"); time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				cmd.Process.Kill()
				cmd.Wait()
				t.Fatalf("backup %v did not serve:\n%s", tc.args, out)
			}
		}
		cmd.Process.Signal(syscall.SIGINT)
		cmd.Wait()
		if !strings.Contains(out.String(), tc.says) {
			t.Errorf("backup %v: want %s in its log:\n%s", tc.args, tc.says, out)
		}
	}
}
