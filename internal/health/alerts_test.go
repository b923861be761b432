package health

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// The alert rules shipped in etc/ are well formed and read only metrics
// pbfs (or Go's and the process's collectors) export: a metric renamed in
// the code fails here, not silently in an operator's Prometheus.
func TestAlertRules(t *testing.T) {
	root := filepath.Join("..", "..")
	raw, err := os.ReadFile(filepath.Join(root, "etc", "prometheus", "pbfs-alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Groups []struct {
			Name  string
			Rules []struct {
				Alert       string
				Expr        string
				For         string
				Labels      map[string]string
				Annotations map[string]string
			}
		}
	}
	dec := yaml.NewDecoder(strings.NewReader(string(raw)))
	dec.KnownFields(true)
	if err := dec.Decode(&file); err != nil {
		t.Fatalf("pbfs-alerts.yml: %v", err)
	}
	code := sourceText(t, root)
	names := regexp.MustCompile(`\b(pbfs|go|process)_[a-z_]+\b`)
	seen := map[string]bool{}
	for _, g := range file.Groups {
		for _, r := range g.Rules {
			if r.Alert == "" || r.Expr == "" || r.Labels["severity"] == "" || r.Annotations["summary"] == "" || r.Annotations["description"] == "" {
				t.Errorf("rule %q: needs alert, expr, a severity label, a summary and a description", r.Alert)
			}
			if seen[r.Alert] {
				t.Errorf("rule %q appears twice", r.Alert)
			}
			seen[r.Alert] = true
			if strings.Count(r.Expr, "(") != strings.Count(r.Expr, ")") || strings.Count(r.Expr, "{") != strings.Count(r.Expr, "}") {
				t.Errorf("rule %q: unbalanced expression %q", r.Alert, r.Expr)
			}
			for _, m := range names.FindAllString(r.Expr, -1) {
				if strings.HasPrefix(m, "pbfs_") && !strings.Contains(code, `"`+m+`"`) {
					t.Errorf("rule %q reads %s, which no pbfs code exports", r.Alert, m)
				}
			}
		}
	}
	if len(seen) == 0 {
		t.Fatal("no rules")
	}
}

// sourceText is every non-test Go file under root, joined.
func sourceText(t *testing.T, root string) string {
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "third_party" || d.Name() == "benchmarks" || strings.HasPrefix(d.Name(), ".")) && p != root {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			src, err := os.ReadFile(p)
			b.Write(src)
			return err
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}
