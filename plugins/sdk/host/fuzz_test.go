package host_test

import (
	"strings"
	"testing"

	"github.com/pbfs/pbfs/plugins/sdk/host"
)

// FuzzParseSpecs: any flag values either parse into specs whose names are
// declared once and whose configs belong to declared plugins, or fail
// with an error; never a panic.
func FuzzParseSpecs(f *testing.F) {
	f.Add("http-proxy=/bin/p", "http-proxy:listen=:8080,upstream=http://x:80")
	f.Add("a=/x\nb=/y", "a:k=v,,k2=v=w\nb:")
	f.Add("=", ":")
	f.Fuzz(func(t *testing.T, plugins, configs string) {
		specs, err := host.ParseSpecs(strings.Split(plugins, "\n"), strings.Split(configs, "\n"))
		if err != nil {
			return
		}
		seen := map[string]bool{}
		for _, s := range specs {
			if s.Name == "" || s.Path == "" || seen[s.Name] {
				t.Fatalf("bad spec %+v in %+v", s, specs)
			}
			seen[s.Name] = true
			for k := range s.Config {
				if k == "" || strings.ContainsAny(k, ",=") {
					t.Fatalf("bad key %q", k)
				}
			}
		}
	})
}
