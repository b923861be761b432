package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/urfave/cli/v2"
	"google.golang.org/grpc/codes"
	grpcstatus "google.golang.org/grpc/status"

	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/internal/manifest"
	"github.com/pbfs/pbfs/internal/status"
	"github.com/pbfs/pbfs/replicate/primary"
	"github.com/pbfs/pbfs/replicate/wire"
)

// pbfs verify compares a running primary's volume with each backup's
// without stopping the service, as DRBD's online verify does. It takes a
// barrier, lists the primary's volume with a hash of every file (local-only
// paths left out) and asks each backup for the same once it has applied
// that barrier. Both sides go on changing meanwhile, so the paths that
// differ are compared again exactly: the primary pauses mutations, seals
// a batch, hashes those paths and has each backup hash its own as of that
// batch (control.Comparison), in rounds of at most compareBudget bytes so
// that a pause stays short. Only what differs then is named.

// compareBudget bounds the bytes one exact round hashes on each side.
const compareBudget = 16 << 20

func verifyCommand() *cli.Command {
	return &cli.Command{
		Name:  "verify",
		Usage: "compare the running primary's volume with every backup's, online, and name each path that differs (the mount fetches the backups' listings; with --token or PBFS_TOKEN, and the TLS flags, verify asks the backups itself)",
		Flags: []cli.Flag{
			&cli.StringFlag{Name: "journal", Required: true, Usage: "journal directory of the running primary"},
			&cli.DurationFlag{Name: "timeout", Value: 10 * time.Minute, Usage: "give up after this long", Action: positive("verify", "timeout")},
			&cli.BoolFlag{Name: "json", Usage: "print JSON, for scripts"},
			&cli.BoolFlag{Name: "repair", Usage: "resync each backup found to differ, wait for it, and verify again (the exit status is the second verify's)"},
			&cli.Int64Flag{Name: "max-paused-file", Value: 64 << 20, Usage: "a file that differs as first read is compared again, with the service's writes paused, only if it holds at most this many bytes of data (a size: 64M); a larger one is reported not verified"},
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
	NotVerified map[string]string `json:"not_verified,omitempty"` // path -> why it was not compared exactly
	Err         string            `json:"error,omitempty"`
}

func verify(c *cli.Context) error {
	if c.Int64("max-paused-file") < 0 {
		return cli.Exit("verify: --max-paused-file must not be negative", 2)
	}
	if err := tlsFiles(c).Check(); err != nil {
		return cli.Exit("verify: "+err.Error(), 2)
	}
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
	// Without a token of its own, verify asks the mount, which holds it,
	// for the backups' manifests.
	token, err := wire.LoadToken(c.String("token"), c.String("token-file"))
	if err != nil && !errors.Is(err, wire.ErrNoToken) || c.String("token-file") != "" && err != nil {
		return cli.Exit("verify: "+err.Error(), 2)
	}
	tls := tlsFiles(c)
	out, err := compareAll(ctx, c, cl, st, token, tls)
	if err != nil {
		return err
	}
	var differ []string
	for _, v := range out {
		if len(v.Differ) > 0 {
			differ = append(differ, v.Backup)
		}
	}
	if !c.Bool("repair") || len(differ) == 0 {
		return report(c, out)
	}
	if !c.Bool("json") {
		printReport(c, out)
	}
	fmt.Fprintf(c.App.ErrWriter, "verify: resyncing %s\n", strings.Join(differ, ", "))
	before, err := cl.Status(ctx)
	if err != nil {
		return cli.Exit("verify: "+err.Error(), 1)
	}
	if err := cl.Resync(ctx, differ...); err != nil {
		return cli.Exit("verify: "+err.Error(), 1)
	}
	if err := waitResync(c, cl, resyncsBefore(before, differ)); err != nil {
		return err
	}
	if out, err = compareAll(ctx, c, cl, st, token, tls); err != nil {
		return err
	}
	if !c.Bool("json") {
		fmt.Fprintln(c.App.Writer, "after the resync:")
	}
	return report(c, out)
}

// compareAll compares the primary's volume with every backup's: the first
// round as listed, then the paths that differed, exactly.
func compareAll(ctx context.Context, c *cli.Context, cl *control.Client, st control.Status, token string, tls wire.TLSFiles) ([]verdict, error) {
	seq, err := cl.Barrier(ctx)
	if err != nil {
		return nil, cli.Exit("verify: "+err.Error(), 1)
	}
	began := time.Now()
	mine, err := cl.Manifest(ctx, nil)
	if err != nil {
		return nil, cli.Exit("verify: "+err.Error(), 1)
	}
	fmt.Fprintf(c.App.ErrWriter, "verify: the primary's volume at seq %d: %d paths hashed in %v\n", seq, len(mine), time.Since(began).Round(time.Millisecond))
	var out []verdict
	suspects := map[string]map[string]bool{} // backup -> paths
	size := map[string]int64{}               // suspect path -> what hashing it again costs (cost)
	for _, b := range st.Backups {
		v := verdict{Backup: b.Addr, Differ: map[string]string{}}
		var m map[string]manifest.Entry
		if token == "" {
			// Through the mount, which holds the token and TLS files.
			m, err = cl.BackupManifest(ctx, b.Addr, seq)
		} else {
			m, err = primary.FetchManifest(ctx, b.Addr, token, tls, seq, nil)
		}
		if err != nil {
			v.Err = err.Error()
			if !tls.Enabled() && grpcstatus.Code(err) == codes.Unavailable {
				// A backup serving TLS resets a plain connection.
				v.Err += " (if the backups use TLS, give verify the mount's --tls-cert, --tls-key and --tls-ca)"
			}
			out = append(out, v)
			continue
		}
		v.Compared = len(mine)
		suspects[b.Addr] = differing(mine, m)
		for p := range suspects[b.Addr] {
			size[p] = max(size[p], cost(mine, m, p))
		}
		fmt.Fprintf(c.App.ErrWriter, "verify: %s: %d paths hashed, %d to compare again\n", b.Addr, len(m), len(suspects[b.Addr]))
		out = append(out, v)
	}
	skipLarge(size, suspects, out, c.Int64("max-paused-file"))
	if err := compareAgain(ctx, c, cl, size, suspects, out); err != nil {
		return nil, cli.Exit("verify: "+err.Error(), 1)
	}
	return out, nil
}

// skipLarge takes the suspect files over limit bytes out of the exact
// rounds and reports them not verified: hashing one with the service's
// writes paused would stall the service (a busy database's 10 GB
// tablespace, which differs in the first round because it changes, took
// its writes away for the 20 s or more that hashing it on both sides
// takes).
func skipLarge(size map[string]int64, suspects map[string]map[string]bool, out []verdict, limit int64) {
	for p, n := range size {
		if n <= limit {
			continue
		}
		for i := range out {
			if suspects[out[i].Backup][p] {
				out[i].notVerified(p, fmt.Sprintf("it differed as first read, while the service kept writing; comparing its %d bytes again exactly would pause the service's writes while they are hashed (--max-paused-file %d)", n, limit))
				delete(suspects[out[i].Backup], p)
			}
		}
		delete(size, p)
	}
}

// compareAgain compares the suspect paths exactly, as of one batch per
// round, and records in out what still differs.
func compareAgain(ctx context.Context, c *cli.Context, cl *control.Client, size map[string]int64, suspects map[string]map[string]bool, out []verdict) error {
	for _, round := range rounds(size, compareBudget) {
		cmp, err := cl.Compare(ctx, round)
		if err != nil {
			return err
		}
		fmt.Fprintf(c.App.ErrWriter, "verify: %d paths compared again as of seq %d; the service's writes paused %v\n", len(round), cmp.Seq, cmp.Paused.Round(time.Microsecond))
		backups := map[string]status.BackupManifest{}
		for _, b := range cmp.Backups {
			backups[b.Backup] = b
		}
		for i := range out {
			v := &out[i]
			b, ok := backups[v.Backup]
			for _, p := range round {
				switch {
				case !suspects[v.Backup][p]:
				case !ok:
					v.notVerified(p, "the primary no longer ships to it")
				case b.Err != "":
					v.notVerified(p, b.Err)
				case manifest.Incomparable(entry(cmp.Primary, p), entry(b.Entries, p)):
					v.notVerified(p, "its contents were hashed by a pbfs from before sparse-aware digests (upgrade it to compare them)")
				default:
					if how := manifest.Diff(entry(cmp.Primary, p), entry(b.Entries, p)); how != "" {
						v.Differ[p] = how
					}
				}
			}
		}
	}
	return nil
}

func (v *verdict) notVerified(p, why string) {
	if v.NotVerified == nil {
		v.NotVerified = map[string]string{}
	}
	v.NotVerified[p] = why
}

// rounds splits the paths, sorted, into groups of at most budget bytes
// (a larger file has a round of its own) and control.MaxComparePaths paths.
func rounds(size map[string]int64, budget int64) [][]string {
	var out [][]string
	var cur []string
	var bytes int64
	for _, p := range slices.Sorted(maps.Keys(size)) {
		if len(cur) > 0 && (bytes+size[p] > budget || len(cur) == control.MaxComparePaths) {
			out, cur, bytes = append(out, cur), nil, 0
		}
		cur, bytes = append(cur, p), bytes+size[p]
	}
	if len(cur) > 0 {
		out = append(out, cur)
	}
	return out
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

// cost is what hashing p again costs: the bytes the primary's copy holds
// on disk (its holes are not read), else the backup's copy's size.
func cost(primary, backup map[string]manifest.Entry, p string) int64 {
	if e := entry(primary, p); !e.Missing {
		if e.Data > 0 {
			return min(e.Data, e.Size)
		}
		return e.Size
	}
	return entry(backup, p).Size
}

func entry(m map[string]manifest.Entry, p string) manifest.Entry {
	if e, ok := m[p]; ok && !e.Missing {
		return e
	}
	return manifest.Entry{Path: p, Missing: true}
}

// report prints the verdicts and fails if a backup differs or could not
// be compared, in whole or in part.
func report(c *cli.Context, out []verdict) error {
	bad := 0
	for _, v := range out {
		if v.Err != "" || len(v.Differ) > 0 || len(v.NotVerified) > 0 {
			bad++
		}
	}
	if c.Bool("json") {
		printJSON(c, out)
	} else {
		printReport(c, out)
	}
	if bad > 0 {
		return cli.Exit(fmt.Sprintf("verify: %d of %d backups differ from the primary or could not be compared", bad, len(out)), 1)
	}
	return nil
}

// printReport says, for people, what each backup's comparison found.
func printReport(c *cli.Context, out []verdict) {
	w := c.App.Writer
	for _, v := range out {
		switch {
		case v.Err != "":
			fmt.Fprintf(w, "%s: not compared: %s\n", v.Backup, v.Err)
		case len(v.Differ) == 0 && len(v.NotVerified) == 0:
			fmt.Fprintf(w, "%s: identical (%d paths)\n", v.Backup, v.Compared)
		case len(v.Differ) == 0:
			fmt.Fprintf(w, "%s: %d of %d paths not verified, no difference found\n", v.Backup, len(v.NotVerified), v.Compared)
		default:
			fmt.Fprintf(w, "%s: %d of %d paths differ\n", v.Backup, len(v.Differ), v.Compared)
		}
		for _, p := range slices.Sorted(maps.Keys(v.Differ)) {
			fmt.Fprintf(w, "  %s: %s\n", p, v.Differ[p])
		}
		for _, p := range slices.Sorted(maps.Keys(v.NotVerified)) {
			fmt.Fprintf(w, "  %s: not verified: %s\n", p, v.NotVerified[p])
		}
	}
}
