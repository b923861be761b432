package journal

import (
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// docs/FORMAT.md §6.2 lists exactly the schema's keys.
func TestSchemaMatchesFormat(t *testing.T) {
	doc, err := os.ReadFile("../docs/FORMAT.md")
	if err != nil {
		t.Fatal(err)
	}
	_, sec, _ := strings.Cut(string(doc), "### 6.2 Badger keys")
	sec, _, _ = strings.Cut(sec, "\n### ")
	var documented []string
	for _, l := range strings.Split(sec, "\n") {
		if !strings.HasPrefix(l, "| `m/") {
			continue
		}
		first, _, _ := strings.Cut(strings.TrimPrefix(l, "| "), " |")
		for _, m := range regexp.MustCompile("`m/([a-z-]+)`").FindAllStringSubmatch(first, -1) {
			documented = append(documented, m[1])
		}
	}
	var names []string
	for _, k := range MetaKeys {
		if k.Type == "" || k.Writer == "" {
			t.Errorf("key %q lacks a type or a writer", k.Name)
		}
		if slices.Contains(names, k.Name) {
			t.Errorf("key %q is in the schema twice", k.Name)
		}
		names = append(names, k.Name)
	}
	slices.Sort(documented)
	slices.Sort(names)
	if !slices.Equal(documented, names) {
		t.Fatalf("FORMAT.md §6.2 documents %v\nthe schema holds %v", documented, names)
	}
}

// No code names a metadata value by a string of its own: every name comes
// from the schema, and a name it lacks is refused.
func TestMetadataNamesComeFromTheSchema(t *testing.T) {
	literal := regexp.MustCompile(`\b(SetMeta|SetMetaUint|Meta|MetaUint)\("|SetMetaUints\(map\[string\]uint64\{"`)
	err := filepath.WalkDir("..", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "third_party" || strings.HasPrefix(d.Name(), ".")) && p != ".." {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for i, l := range strings.Split(string(src), "\n") {
			if literal.MatchString(l) {
				t.Errorf("%s:%d names a metadata value by a literal: %s", p, i+1, strings.TrimSpace(l))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	st, err := OpenStore(t.TempDir(), StoreOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.SetMeta("volum", []byte("x")); err == nil || !strings.Contains(err.Error(), "not in the schema") {
		t.Fatalf("a name the schema lacks: %v", err)
	}
	if err := st.SetMeta(KeyVolume.Name, []byte("0123")); err != nil {
		t.Fatal(err)
	}
}
