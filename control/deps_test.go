package control

import (
	"os/exec"
	"strings"
	"testing"
)

// control serves the mount, a backup and their plugins through small
// interfaces of its own (Backend, Members, BackupManifests, Watchable)
// and the plain shapes of internal/status, so it imports none of the
// packages it serves, nor what they pull in (gRPC, go-plugin, FUSE).
func TestControlImportsNoServedPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	const mod = "github.com/pbfs/pbfs/"
	served := []string{"replicate", "plugins", "mount", "replica", "coord", "dockervol", "capture", "apply", "fs"}
	for _, dep := range strings.Fields(string(out)) {
		for _, s := range served {
			if dep == mod+s || strings.HasPrefix(dep, mod+s+"/") {
				t.Errorf("control depends on %s", dep)
			}
		}
	}
}
