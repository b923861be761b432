package benchproc

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// ShownPath is how a report names a file: relative to the working
// directory when it is under it, else by its base name, so a committed
// report carries no paths of the machine it ran on.
func ShownPath(p string) string {
	if !filepath.IsAbs(p) {
		return p
	}
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(rel, "..") {
			return rel
		}
	}
	return filepath.Base(p)
}

// ShownArgs is a command line for a report: arguments quoted where the
// shell would need it, absolute paths (also as -flag=PATH) shown with
// ShownPath.
func ShownArgs(args []string) string {
	shown := make([]string, 0, len(args))
	for _, a := range args {
		if k, v, ok := strings.Cut(a, "="); ok && strings.HasPrefix(k, "-") {
			a = k + "=" + ShownPath(v)
		} else {
			a = ShownPath(a)
		}
		if a == "" || strings.ContainsAny(a, " '\"") {
			a = strconv.Quote(a)
		}
		shown = append(shown, a)
	}
	return strings.Join(shown, " ")
}
