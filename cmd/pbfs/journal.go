package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/urfave/cli/v2"

	"github.com/pbfs/pbfs/apply"
	"github.com/pbfs/pbfs/control"
	"github.com/pbfs/pbfs/internal/human"
	"github.com/pbfs/pbfs/internal/pathcheck"
	"github.com/pbfs/pbfs/journal"
)

func journalCommand() *cli.Command {
	jflag := &cli.StringFlag{Name: "journal", Required: true, Usage: "journal directory"}
	jsonFlag := &cli.BoolFlag{Name: "json", Usage: "print JSON, for scripts"}
	return &cli.Command{
		Name:   "journal",
		Usage:  "inspect, verify and replay a journal (also while its mount runs)",
		Action: needCommand,
		Subcommands: []*cli.Command{
			{Name: "ls", Usage: "list batches", Flags: []cli.Flag{jflag, jsonFlag}, Action: journalLs},
			{Name: "show", Usage: "print one batch's ops", ArgsUsage: "SEQ", Flags: []cli.Flag{jflag, jsonFlag}, Action: journalShow},
			{Name: "stats", Usage: "totals: ops by kind; written, coalesced and compressed bytes", Flags: []cli.Flag{jflag, jsonFlag}, Action: journalStats},
			{Name: "verify", Usage: "check every checksum and the seq chain", Flags: []cli.Flag{jflag, jsonFlag}, Action: journalVerify},
			{Name: "replay", Usage: "apply batches to TARGET, a copy of the volume's starting state", ArgsUsage: "TARGET",
				Flags: []cli.Flag{jflag, jsonFlag,
					&cli.Uint64Flag{Name: "from", Value: 1, Usage: "first seq to apply"},
					&cli.Uint64Flag{Name: "to", Usage: "last seq to apply (default: the newest)"},
				}, Action: journalReplay},
		},
	}
}

// source opens the journal directly, or through the running mount's
// control socket when the mount holds it.
type source interface {
	journal.Source
}

func openSource(c *cli.Context) (source, func(), error) {
	dir := c.String("journal")
	if _, err := os.Stat(dir); err != nil {
		return nil, nil, fmt.Errorf("open journal: %w", err)
	}
	if !journal.Exists(dir) {
		return nil, nil, fmt.Errorf("open journal: %s is no pbfs journal (it has no MANIFEST)", dir)
	}
	st, err := journal.OpenStore(dir, journal.StoreOptions{ReadOnly: true})
	if errors.Is(err, journal.ErrNeedsRecovery) {
		// A crash left the journal's logs ending in a torn write. Cutting
		// it off is what the next mount or backup does on opening it; an
		// operator looking at the journal after a crash must not have to
		// start the daemon first.
		fmt.Fprintln(c.App.ErrWriter, "journal: it was not closed cleanly; recovering its logs (cutting off a torn last write) as the next start would")
		st, err = journal.OpenStore(dir, journal.StoreOptions{})
	}
	if err == nil {
		return st, func() { st.Close() }, nil
	}
	if !errors.Is(err, journal.ErrLocked) {
		return nil, nil, err
	}
	cl, cerr := control.Dial(dir)
	if cerr != nil {
		return nil, nil, cerr
	}
	return cl, func() {}, nil
}

func withSource(c *cli.Context, fn func(source) error) error {
	src, done, err := openSource(c)
	if err != nil {
		return cli.Exit("journal: "+err.Error(), 1)
	}
	defer done()
	return fn(src)
}

func journalLs(c *cli.Context) error {
	return withSource(c, func(src source) error {
		w := tabwriter.NewWriter(c.App.Writer, 0, 0, 2, ' ', tabwriter.AlignRight)
		asJSON := c.Bool("json")
		var rows []lsRow
		if !asJSON {
			fmt.Fprintln(w, "SEQ\tEPOCH\tCREATED\tOPS\tWRITTEN\tRAW\tSTORED\tCHECKSUM\t")
		}
		bad, err := journal.Walk(src, 0, 0, false, func(k journal.Checked) error {
			h := k.Header
			if asJSON {
				r := lsRow{Seq: k.Seq, Stored: k.Size}
				if k.Err != nil {
					r.Error = k.Err.Error()
				} else {
					r.Epoch, r.Created, r.Ops, r.Written, r.Raw, r.Checksum = h.Epoch, h.Created.UTC(), h.OpCount, h.Written, h.RawLen, fmt.Sprintf("%08x", h.Checksum)
				}
				rows = append(rows, r)
				return nil
			}
			if k.Err != nil {
				fmt.Fprintf(w, "%d\t-\t-\t-\t-\t-\t%s\tBAD: %v\t\n", k.Seq, human.Bytes(int64(k.Size)), k.Err)
				return nil
			}
			fmt.Fprintf(w, "%d\t%d\t%s\t%d\t%s\t%s\t%s\t%08x\t\n", h.Seq, h.Epoch, h.Created.UTC().Format("2006-01-02T15:04:05.000Z"),
				h.OpCount, human.Bytes(int64(h.Written)), human.Bytes(int64(h.RawLen)), human.Bytes(int64(k.Size)), h.Checksum)
			return nil
		})
		w.Flush()
		if err != nil {
			return cli.Exit("journal ls: "+err.Error(), 1)
		}
		if asJSON {
			printJSON(c, rows)
		}
		if bad > 0 {
			return cli.Exit(fmt.Sprintf("journal ls: %d corrupt batches (run journal verify)", bad), 1)
		}
		return nil
	})
}

func journalShow(c *cli.Context) error {
	seq, err := strconv.ParseUint(c.Args().First(), 10, 64)
	if err != nil {
		return cli.Exit("journal show: want a batch SEQ", 2)
	}
	return withSource(c, func(src source) error {
		enc, err := src.Get(seq)
		if err != nil {
			return cli.Exit("journal show: "+err.Error(), 1)
		}
		b, err := journal.Decode(enc)
		if err != nil {
			return cli.Exit("journal show: "+err.Error(), 1)
		}
		h, _ := journal.DecodeHeader(enc)
		if c.Bool("json") {
			ops := make([]string, len(b.Ops))
			for i := range b.Ops {
				ops[i] = b.Ops[i].String()
			}
			return printJSON(c, map[string]any{"seq": b.Seq, "epoch": b.Epoch, "created": b.Created.UTC(), "written": b.Written,
				"raw": h.RawLen, "stored": len(enc), "checksum": fmt.Sprintf("%08x", h.Checksum), "prev": fmt.Sprintf("%08x", b.Prev),
				"more": h.More(), "ops": ops})
		}
		fmt.Fprintf(c.App.Writer, "batch %d epoch %d created %s ops %d written %d raw %d stored %d checksum %08x prev %08x\n",
			b.Seq, b.Epoch, b.Created.UTC().Format("2006-01-02T15:04:05.000000Z"), len(b.Ops), b.Written, h.RawLen, len(enc), h.Checksum, b.Prev)
		for i := range b.Ops {
			fmt.Fprintf(c.App.Writer, "%6d  %s\n", i, b.Ops[i].String())
		}
		return nil
	})
}

func journalStats(c *cli.Context) error {
	return withSource(c, func(src source) error {
		s, err := journal.Collect(src)
		if err != nil {
			return cli.Exit("journal stats: "+err.Error(), 1)
		}
		w := c.App.Writer
		if c.Bool("json") {
			ops := map[string]int{}
			for k, n := range s.Ops {
				ops[k.String()] = n
			}
			printJSON(c, map[string]any{"batches": s.Batches, "first_seq": s.FirstSeq, "last_seq": s.LastSeq, "ops": ops,
				"op_count": s.OpCount, "written": s.Written, "payload": s.Payload, "raw": s.Raw, "stored": s.Stored, "corrupt": s.Corrupt})
			if s.Corrupt > 0 {
				return cli.Exit("", 1)
			}
			return nil
		}
		fmt.Fprintf(w, "batches      %d (seq %d..%d)\n", s.Batches, s.FirstSeq, s.LastSeq)
		fmt.Fprintf(w, "ops          %d\n", s.OpCount)
		for _, k := range journal.Kinds() {
			if s.Ops[k] > 0 {
				fmt.Fprintf(w, "  %-12s %d\n", k, s.Ops[k])
			}
		}
		fmt.Fprintf(w, "written      %s (by the service)\n", human.Bytes(int64(s.Written)))
		fmt.Fprintf(w, "coalesced    %s of payload, %s encoded (%s of written)\n", human.Bytes(int64(s.Payload)), human.Bytes(int64(s.Raw)), ratio(s.Raw, s.Written))
		fmt.Fprintf(w, "stored       %s compressed (%s of encoded, %s of written)\n", human.Bytes(int64(s.Stored)), ratio(s.Stored, s.Raw), ratio(s.Stored, s.Written))
		if s.Corrupt > 0 {
			fmt.Fprintf(w, "corrupt      %d batches (not counted above)\n", s.Corrupt)
			return cli.Exit("", 1)
		}
		return nil
	})
}

func ratio(a, b uint64) string {
	if b == 0 {
		return "n/a"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(a)/float64(b))
}

func journalVerify(c *cli.Context) error {
	return withSource(c, func(src source) error {
		n := 0
		p := newProgress(c.App.ErrWriter, "journal verify", "batches", int64(lastSeq(src)))
		defer p.finish()
		corrupt := map[uint64]string{}
		bad, err := journal.Walk(src, 0, 0, true, func(k journal.Checked) error {
			n++
			p.set(int64(k.Seq))
			if k.Err != nil {
				corrupt[k.Seq] = k.Err.Error()
				fmt.Fprintf(c.App.ErrWriter, "batch %d: %v\n", k.Seq, k.Err)
			}
			return nil
		})
		if err != nil {
			return cli.Exit("journal verify: "+err.Error(), 1)
		}
		// What the batch log holds besides whole records, and what is wrong
		// with the metadata; through a running mount's control socket the
		// mount opened the journal, and refused or logged either.
		var notes, meta []string
		damaged, metaDamaged := false, false
		if d, ok := src.(*journal.Store); ok {
			notes, damaged = d.Damage()
			meta, metaDamaged = d.MetaDamage()
		}
		p.finish()
		for _, note := range notes {
			fmt.Fprintf(c.App.ErrWriter, "batch log: %s\n", note)
		}
		for _, note := range meta {
			fmt.Fprintln(c.App.ErrWriter, note) // "metadata ..."
		}
		if c.Bool("json") {
			printJSON(c, map[string]any{"batches": n, "corrupt": corrupt, "log": notes, "metadata": meta, "ok": bad == 0 && !damaged && !metaDamaged})
		}
		if metaDamaged {
			return cli.Exit(fmt.Sprintf("journal verify: the journal's metadata is damaged (above; %d batches checked, %d corrupt): %s", n, bad, journal.MetaRemedy), 1)
		}
		if bad > 0 {
			return cli.Exit(fmt.Sprintf("journal verify: %d of %d batches are corrupt", bad, n), 1)
		}
		if damaged {
			return cli.Exit(fmt.Sprintf("journal verify: %d batches intact, but the batch log is damaged past them (above); a mount or backup opening it cuts it there", n), 1)
		}
		if !c.Bool("json") {
			tail := ""
			if len(notes) > 0 {
				tail = ", then a torn append (above), which the next mount or backup cuts off"
			}
			fmt.Fprintf(c.App.Writer, "ok: %d batches, checksums and seq chain intact%s\n", n, tail)
		}
		return nil
	})
}

func journalReplay(c *cli.Context) error {
	if c.NArg() != 1 {
		return cli.Exit("journal replay: want a TARGET directory", 2)
	}
	from, to := c.Uint64("from"), c.Uint64("to")
	if to > 0 && to < from {
		return cli.Exit(fmt.Sprintf("journal replay: --to %d is before --from %d", to, from), 2)
	}
	// Batches replayed into a served volume would be captured as new
	// writes, behind the back of the service that owns it.
	if point, err := pathcheck.ServedBy(c.Args().First()); err == nil && point != "" {
		// 1, as mount and backup refuse a served volume: the state of the
		// machine, not a mistake in the command.
		return cli.Exit(fmt.Sprintf("journal replay: TARGET %s lies on the pbfs mount at %s: replay into a directory no pbfs serves", c.Args().First(), point), 1)
	}
	return withSource(c, func(src source) error {
		// Check the whole range before touching the target, so a corrupt
		// batch in the middle never leaves it half replayed.
		batches, prog, err := replayRange(c, src, from, to)
		if err != nil {
			return err
		}
		batches, partial := journal.WholeSeals(batches)
		if len(partial) > 0 {
			fmt.Fprintf(c.App.ErrWriter, "journal replay: batches %d..%d begin a seal whose last batch is not in the range; not applied\n",
				partial[0].Seq, partial[len(partial)-1].Seq)
		}
		a, err := apply.New(c.Args().First(), logger(c))
		if err != nil {
			return cli.Exit("journal replay: "+err.Error(), 1)
		}
		defer a.Close()
		prog.finish()
		p := newProgress(c.App.ErrWriter, "journal replay: apply", "batches", int64(len(batches)))
		defer p.finish()
		for i, b := range batches {
			p.set(int64(i))
			if err := a.Apply(b); err != nil {
				done := "none of the range was applied"
				if i > 0 {
					done = fmt.Sprintf("batches %d-%d were applied", batches[0].Seq, batches[i-1].Seq)
				}
				return cli.Exit(fmt.Sprintf("journal replay: batch %d: %v (%s)", b.Seq, err, done), 1)
			}
		}
		if c.Bool("json") {
			var from, to uint64
			if len(batches) > 0 {
				from, to = batches[0].Seq, batches[len(batches)-1].Seq
			}
			return printJSON(c, map[string]any{"replayed": len(batches), "from": from, "to": to, "partial": len(partial)})
		}
		fmt.Fprintf(c.App.Writer, "replayed %d batches\n", len(batches))
		return nil
	})
}

// replayRange reads and checks every batch of from..to (to 0: the end)
// before anything is applied, and refuses a range that is corrupt, does
// not start at from, or starts inside a seal. The progress it returns is
// the check's, finished by the caller.
func replayRange(c *cli.Context, src source, from, to uint64) ([]*journal.Batch, *progress, error) {
	var batches []*journal.Batch
	last := lastSeq(src)
	if from > last+1 {
		// Nothing to replay, and not because the journal was replayed
		// up to its end: a --from past it is a mistake, not success.
		return nil, nil, cli.Exit(fmt.Sprintf("journal replay: --from %d: the journal ends at seq %d; nothing applied", from, last), 1)
	}
	if to > 0 {
		last = min(last, to)
	}
	check := newProgress(c.App.ErrWriter, "journal replay: check", "batches", int64(last))
	bad, err := journal.Walk(src, from, to, true, func(k journal.Checked) error {
		check.set(int64(k.Seq))
		if k.Err != nil {
			fmt.Fprintf(c.App.ErrWriter, "batch %d: %v\n", k.Seq, k.Err)
			return nil
		}
		batches = append(batches, k.Batch)
		return nil
	})
	if err != nil {
		return nil, nil, cli.Exit("journal replay: "+err.Error(), 1)
	}
	if bad > 0 {
		return nil, nil, cli.Exit(fmt.Sprintf("journal replay: refusing: %d corrupt batches in the range; nothing applied", bad), 1)
	}
	if len(batches) > 0 && batches[0].Seq != from {
		return nil, nil, cli.Exit(fmt.Sprintf("journal replay: refusing: first batch is %d, not %d; nothing applied", batches[0].Seq, from), 1)
	}
	if from > 1 {
		if enc, err := src.Get(from - 1); err == nil {
			if h, err := journal.DecodeHeader(enc); err == nil && h.More() {
				return nil, nil, cli.Exit(fmt.Sprintf("journal replay: refusing: batch %d continues the seal batch %d began; start where a seal starts", from, from-1), 1)
			}
		}
	}
	return batches, check, nil
}

// lsRow is one batch in journal ls --json.
type lsRow struct {
	Seq      uint64    `json:"seq"`
	Epoch    uint64    `json:"epoch,omitempty"`
	Created  time.Time `json:"created,omitzero"`
	Ops      uint32    `json:"ops,omitempty"`
	Written  uint32    `json:"written,omitempty"`
	Raw      uint32    `json:"raw,omitempty"`
	Stored   int       `json:"stored"`
	Checksum string    `json:"checksum,omitempty"`
	Error    string    `json:"error,omitempty"`
}

// printJSON writes v indented, for scripts.
func printJSON(c *cli.Context, v any) error {
	e := json.NewEncoder(c.App.Writer)
	e.SetIndent("", "  ")
	return e.Encode(v)
}
