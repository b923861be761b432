package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/benchmarks/internal/treecmp"
	"github.com/pbfs/pbfs/control"
)

// Part 3: a deposed primary rejoining. A primary R with one backup B on a
// volume of -rejoin-files files; R writes a little that B acknowledges,
// then, with B frozen, a little more that only R journals; R and B are
// killed with -9; B is promoted and writes a little; R comes back as a
// backup of B. The rejoin's resync is timed (a targeted one: the paths
// either history touched since they parted), then, on the same volumes,
// a `pbfs resync`, which is a full one, as every rejoin was before
// targeted resyncs.

// rejoinRun is one resync of the rejoined primary, as the new primary
// logged it.
type rejoinRun struct {
	name string
	done map[string]string // the new primary's "resync done"
	wall time.Duration     // backup start (or pbfs resync) to "resync done"
	cmp  treecmp.Comparison
}

// rejoinResult is part 3's outcome.
type rejoinResult struct {
	built *built
	runs  []*rejoinRun
}

func partRejoin(ctx context.Context, e *env) error {
	cfg := e.cfg
	dir := filepath.Join(e.runDir, "rejoin")
	p := &rejoinPart{e: e, dir: dir,
		vol: filepath.Join(dir, "vol"), bvol: filepath.Join(dir, "bvol"),
		jp: filepath.Join(dir, "jp"), jb: filepath.Join(dir, "jb")}
	for _, d := range []string{p.vol, p.bvol} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	fmt.Fprintf(os.Stderr, "part 3: building the volume (%d files, %d MB)\n", cfg.rejoinFiles, cfg.rejoinMB)
	bl, err := buildVolume(p.vol, volumeSpec{files: cfg.rejoinFiles, dirs: max(cfg.rejoinFiles/100, 1), bytes: cfg.rejoinMB * 1e6, seed: cfg.seed})
	if err != nil {
		return fmt.Errorf("build volume: %w", err)
	}
	res := &rejoinResult{built: bl}
	e.rep.rejoin = res
	if p.raddr, err = freeAddr(); err != nil {
		return err
	}
	if p.baddr, err = freeAddr(); err != nil {
		return err
	}
	if err := p.diverge(ctx); err != nil {
		return err
	}
	return p.rejoin(ctx, res)
}

// rejoinPart is part 3's directories and addresses: vol and jp are the
// old primary's (R), bvol and jb its backup's (B); B listens on baddr, R
// on raddr once it rejoins.
type rejoinPart struct {
	e                      *env
	dir, vol, bvol, jp, jb string
	raddr, baddr           string
}

// diverge starts R with B, lets B resync and acknowledge some writes,
// then freezes B, writes more that only R journals, and kills both.
func (p *rejoinPart) diverge(ctx context.Context) error {
	e, vol, bvol := p.e, p.vol, p.bvol
	// Both are killed below: started here, not by e's helpers, whose stop
	// takes a process killed for an error.
	r, err := e.startKillable("old-primary", p.dir, vol, e.bin, "mount", "--journal", p.jp, "--backup", p.baddr, "--ack", "all", vol)
	if err != nil {
		return err
	}
	rcl, err := waitMounted(ctx, r, vol, p.jp)
	if err != nil {
		return err
	}
	b, err := e.startKillable("backup", p.dir, bvol, e.bin, "backup", "--listen", p.baddr, "--journal", p.jb, bvol)
	if err != nil {
		return err
	}
	if err := waitListening(ctx, b, p.baddr); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "part 3: the backup's first resync")
	if _, err := r.WaitEvent(ctx, "resync done", 0, 10*time.Minute); err != nil {
		return err
	}
	if err := writeSome(vol, "shared", 20); err != nil {
		return err
	}
	if _, err := barrierApplied(ctx, rcl, 2*time.Minute); err != nil {
		return err
	}
	sleep(ctx, 2500*time.Millisecond) // the seeded files older than the walk's margin
	b.Cmd.Process.Signal(syscall.SIGSTOP)
	if err := writeSome(vol, "old", 20); err != nil {
		return err
	}
	sleep(ctx, 300*time.Millisecond) // journaled: the seal interval is 50 ms
	for _, x := range []*proc{r, b} {
		x.Cmd.Process.Kill()
		for !x.Exited() {
			time.Sleep(10 * time.Millisecond)
		}
	}
	detach(vol)
	detach(bvol)
	return nil
}

// rejoin promotes B, which writes a little, brings R back as its backup,
// and measures the rejoin's resync and then a `pbfs resync` of R.
func (p *rejoinPart) rejoin(ctx context.Context, res *rejoinResult) error {
	e := p.e
	fmt.Fprintln(os.Stderr, "part 3: promoting the backup")
	n, ncl, err := e.startCmd(ctx, "new-primary", "promote", p.dir, p.bvol, p.jb, "--backup", p.raddr)
	if err != nil {
		return err
	}
	if err := writeSome(p.bvol, "new", 20); err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "part 3: the old primary rejoins")
	started := time.Now()
	if _, err := e.startBackup(ctx, "rejoined", p.dir, p.raddr, p.vol, p.jp); err != nil {
		return err
	}
	if err := res.measure(ctx, n, ncl, "rejoin of the deposed primary", 0, started, p.bvol, p.vol); err != nil {
		return err
	}
	started = time.Now()
	if out, err := exec.Command(e.bin, "resync", "--journal", p.jb).CombinedOutput(); err != nil {
		return fmt.Errorf("pbfs resync: %v: %s", err, out)
	}
	return res.measure(ctx, n, ncl, "`pbfs resync` of it (full)", 1, started, p.bvol, p.vol)
}

// measure waits for the new primary's resync number i+1 and the backup's
// apply of a barrier after it, then compares the volumes.
func (res *rejoinResult) measure(ctx context.Context, n *proc, cl *control.Client, name string, i int, started time.Time, vol, bvol string) error {
	run := &rejoinRun{name: name}
	var err error
	if run.done, err = n.WaitEvent(ctx, "resync done", i, 10*time.Minute); err != nil {
		return err
	}
	run.wall = time.Since(started)
	fmt.Fprintf(os.Stderr, "  %s: %v\n", name, run.done)
	if _, err := barrierApplied(ctx, cl, 2*time.Minute); err != nil {
		return err
	}
	if run.cmp, err = treecmp.Compare(vol, bvol); err != nil {
		return err
	}
	res.runs = append(res.runs, run)
	if !run.cmp.OK() {
		return fmt.Errorf("%s: the rejoined primary differs from the new one:\n%s", name, strings.Join(run.cmp.Diffs[:min(20, len(run.cmp.Diffs))], "\n"))
	}
	return nil
}

// writeSome writes n small files named after tag in the volume's root.
func writeSome(vol, tag string, n int) error {
	for i := 0; i < n; i++ {
		if err := os.WriteFile(filepath.Join(vol, fmt.Sprintf("%s-%03d", tag, i)), []byte(tag), 0o644); err != nil {
			return err
		}
	}
	return nil
}

// detach lazily unmounts everything at dir: a killed primary's dead mount,
// a killed backup's guard of its copy.
func detach(dir string) {
	for i := 0; i < 16 && syscall.Unmount(dir, syscall.MNT_DETACH) == nil; i++ {
	}
}

// startKillable starts argv, to be killed; at the end it is killed if
// still running, and vol detached.
func (e *env) startKillable(name, dir, vol string, argv ...string) (*proc, error) {
	p, err := startProc(name, filepath.Join(dir, name+".log"), []string{"PBFS_TOKEN=" + e.token}, argv...)
	if err != nil {
		return nil, err
	}
	e.onStop(func() error {
		if !p.Exited() {
			p.Cmd.Process.Kill()
		}
		detach(vol)
		return nil
	})
	return p, nil
}

// markdown writes part 3's section.
func (res *rejoinResult) markdown(b *strings.Builder) {
	bl := res.built
	fmt.Fprintf(b, "\n## Part 3: a deposed primary rejoining\n\n")
	fmt.Fprintf(b, "Volume: %s regular files in %d directories, %s. The primary wrote 20 files its backup acknowledged, then, with the backup frozen, 20 it alone journaled; both were killed with -9; the backup was promoted and wrote 20 files; the old primary came back as a backup of it. Then `pbfs resync` of the same backup, a full resync, as every rejoin was before targeted ones.\n\n",
		commas(int64(bl.files)), bl.dirs, bytesStr(float64(bl.bytes)))
	b.WriteString("| | kind | entries sent | blocks sent | pause | resync took (log) | start to \"resync done\" | equal |\n|---|---|---:|---:|---:|---:|---:|---|\n")
	for _, r := range res.runs {
		eq := "yes"
		if !r.cmp.OK() {
			eq = fmt.Sprintf("NO (%d)", len(r.cmp.Diffs))
		}
		fmt.Fprintf(b, "| %s | %s | %s of %s | %s | %s | %s | %s | %s |\n", r.name, r.done["kind"], r.done["entries_sent"], r.done["of"],
			r.done["blocks_sent"], r.done["pause"], r.done["took"], r.wall.Round(10*time.Millisecond), eq)
	}
}
