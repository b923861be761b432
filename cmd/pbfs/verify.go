package main

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sort"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/internal/manifest"
	"github.com/pbfs/pbfs/replicate"
)

// pbfs verify compares a running primary's volume with each backup's
// without stopping the service, as DRBD's online verify does. It takes a
// barrier, lists the primary's volume with a hash of every file (local-only
// paths left out) and asks each backup for the same once it has applied
// that barrier. Both sides go on changing meanwhile, so a path that
// differs is compared again after a second barrier: it is named as
// differing only if the primary's copy did not change between the two
// rounds and the backup's still differs; a path the service kept changing
// is named as not verified.

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "compare the running primary's volume with every backup's, online, and name each path that differs",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "journal", Required: true, Usage: "journal directory of the running primary"},
			&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "give up after this long"},
			&cli.BoolFlag{Name: "json", Usage: "print JSON, for scripts"},
			tokenFlag, tokenFileFlag, tlsFlags[0], tlsFlags[1], tlsFlags[2],
		},
		Action: verify,
	}
}

// verdict is one backup's result.
type verdict struct {
	Backup      string            `json:"backup"`
	Compared    int               `json:"compared"`
	Differ      map[string]string `json:"differ,omitempty"`       // path -> how
	NotVerified []string          `json:"not_verified,omitempty"` // changed on the primary meanwhile
	Err         string            `json:"error,omitempty"`
}

func verify(c *cli.Context) error {
	ctx, cancel := context.WithTimeout(c.Context, c.Duration("timeout"))
	defer cancel()
	cl, err := control.Dial(c.String("journal"))
	if err != nil {
		return cli.Exit("verify: "+err.Error(), 1)
	}
	st, err := cl.Status(ctx)
	if err != nil {
		return cli.Exit("verify: "+err.Error(), 1)
	}
	if st.Role != "primary" || len(st.Backups) == 0 {
		return cli.Exit("verify: run it against a primary that has backups (this is a "+st.Role+" with none)", 2)
	}
	token, err := replicate.LoadToken(c.String("token"), c.String("token-file"))
	if err != nil {
		return cli.Exit("verify: "+err.Error(), 2)
	}
	tls := tlsFiles(c)
	seq, err := cl.Barrier(ctx)
	if err != nil {
		return cli.Exit("verify: "+err.Error(), 1)
	}
	began := time.Now()
	primary, err := cl.Manifest(ctx, nil)
	if err != nil {
		return cli.Exit("verify: "+err.Error(), 1)
	}
	fmt.Fprintf(c.App.ErrWriter, "verify: the primary's volume at seq %d: %d paths hashed in %v\n", seq, len(primary), time.Since(began).Round(time.Millisecond))
	var out []verdict
	suspects := map[string]map[string]bool{} // backup -> paths
	for _, b := range st.Backups {
		v := verdict{Backup: b.Addr, Differ: map[string]string{}}
		m, err := replicate.FetchManifest(ctx, b.Addr, token, tls, seq, nil)
		if err != nil {
			v.Err = err.Error()
			out = append(out, v)
			continue
		}
		v.Compared = len(primary)
		suspects[b.Addr] = differing(primary, m)
		fmt.Fprintf(c.App.ErrWriter, "verify: %s: %d paths hashed, %d to compare again\n", b.Addr, len(m), len(suspects[b.Addr]))
		out = append(out, v)
	}
	// The second round: only what differed, after another barrier.
	var paths []string
	seen := map[string]bool{}
	for _, s := range suspects {
		for p := range s {
			if !seen[p] {
				seen[p] = true
				paths = append(paths, p)
			}
		}
	}
	if len(paths) > 0 {
		sort.Strings(paths)
		if seq, err = cl.Barrier(ctx); err != nil {
			return cli.Exit("verify: "+err.Error(), 1)
		}
		again, err := cl.Manifest(ctx, paths)
		if err != nil {
			return cli.Exit("verify: "+err.Error(), 1)
		}
		for i := range out {
			v := &out[i]
			s := suspects[v.Backup]
			if len(s) == 0 {
				continue
			}
			mine := slices.Sorted(maps.Keys(s))
			m, err := replicate.FetchManifest(ctx, v.Backup, token, tls, seq, mine)
			if err != nil {
				v.Err = err.Error()
				continue
			}
			for _, p := range mine {
				now := entry(again, p)
				if manifest.Diff(entry(primary, p), now) != "" {
					v.NotVerified = append(v.NotVerified, p)
				} else if how := manifest.Diff(now, entry(m, p)); how != "" {
					v.Differ[p] = how
				}
			}
		}
		// The backups read after the primary did: a path the primary
		// changed since is not verified, not different.
		if err := settle(ctx, cl, again, out); err != nil {
			return cli.Exit("verify: "+err.Error(), 1)
		}
	}
	return report(c, out)
}

// settle reads the primary once more for the paths still differing and
// moves those it changed since the second round to NotVerified.
func settle(ctx context.Context, cl *control.Client, again map[string]manifest.Entry, out []verdict) error {
	var paths []string
	for _, v := range out {
		for p := range v.Differ {
			paths = append(paths, p)
		}
	}
	if len(paths) == 0 {
		return nil
	}
	third, err := cl.Manifest(ctx, paths)
	if err != nil {
		return err
	}
	for i := range out {
		v := &out[i]
		for p := range v.Differ {
			if manifest.Diff(entry(again, p), entry(third, p)) != "" {
				delete(v.Differ, p)
				v.NotVerified = append(v.NotVerified, p)
			}
		}
	}
	return nil
}

// differing lists the paths whose entries differ between the primary's
// manifest and a backup's, either way.
func differing(primary, backup map[string]manifest.Entry) map[string]bool {
	out := map[string]bool{}
	for p, e := range primary {
		if manifest.Diff(e, entry(backup, p)) != "" {
			out[p] = true
		}
	}
	for p := range backup {
		if _, ok := primary[p]; !ok {
			out[p] = true
		}
	}
	return out
}

func entry(m map[string]manifest.Entry, p string) manifest.Entry {
	if e, ok := m[p]; ok && !e.Missing {
		return e
	}
	return manifest.Entry{Path: p, Missing: true}
}

// report prints the verdicts and fails if a backup differs or could not
// be compared.
func report(c *cli.Context, out []verdict) error {
	bad := 0
	for _, v := range out {
		if v.Err != "" || len(v.Differ) > 0 {
			bad++
		}
	}
	w := c.App.Writer
	if c.Bool("json") {
		printJSON(c, out)
	} else {
		for _, v := range out {
			switch {
			case v.Err != "":
				fmt.Fprintf(w, "%s: not compared: %s\n", v.Backup, v.Err)
			case len(v.Differ) == 0:
				fmt.Fprintf(w, "%s: identical (%d paths)\n", v.Backup, v.Compared)
			default:
				fmt.Fprintf(w, "%s: %d of %d paths differ\n", v.Backup, len(v.Differ), v.Compared)
				for _, p := range slices.Sorted(maps.Keys(v.Differ)) {
					fmt.Fprintf(w, "  %s: %s\n", p, v.Differ[p])
				}
			}
			for _, p := range v.NotVerified {
				fmt.Fprintf(w, "  %s: changed on the primary while verifying; not verified\n", p)
			}
		}
	}
	if bad > 0 {
		return cli.Exit(fmt.Sprintf("verify: %d of %d backups differ from the primary or could not be compared", bad, len(out)), 1)
	}
	return nil
}
