package main

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/internal/mariadbtest"
	"github.com/pbfs/pbfs/replicate/backup"
	"github.com/pbfs/pbfs/replicate/wire"
)

// dbArgs are MariaDB's settings in these tests: Debian's defaults where
// they matter (flush at every commit, O_DIRECT, doublewrite), plus a pid
// file in the data directory, which mysql-hint must keep local-only.
func dbArgs(vol string) []string {
	return []string{"--innodb-flush-log-at-trx-commit=1", "--pid-file=" + filepath.Join(vol, "host.pid")}
}

// rowService writes one row per POST /row/ID and answers 200 once the
// INSERT committed: the "small test service" in front of which the proxy
// holds responses.
type rowService struct{ db *sql.DB }

func (s *rowService) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	id, err := strconv.Atoi(filepath.Base(r.URL.Path))
	if r.Method != http.MethodPost || err != nil {
		http.Error(w, "POST /row/ID", http.StatusBadRequest)
		return
	}
	if _, err := s.db.ExecContext(r.Context(), "INSERT INTO app.ledger (id, payload) VALUES (?, ?)", id, payload(id)); err != nil {
		http.Error(w, err.Error(), http.StatusServiceUnavailable)
		return
	}
	w.Write([]byte("ok"))
}

func payload(id int) string { return fmt.Sprintf("row %d acknowledged", id) }

func createLedger(t *testing.T, db *sql.DB) {
	t.Helper()
	for _, q := range []string{"CREATE DATABASE app", "CREATE TABLE app.ledger (id INT PRIMARY KEY, payload VARCHAR(64) NOT NULL) ENGINE=InnoDB"} {
		if _, err := db.Exec(q); err != nil {
			t.Fatal(err)
		}
	}
}

// ledger is what clients saw acknowledged.
type ledger struct {
	mu    sync.Mutex
	acked []int
}

func (l *ledger) add(id int) {
	l.mu.Lock()
	l.acked = append(l.acked, id)
	l.mu.Unlock()
}

func (l *ledger) ids() []int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]int(nil), l.acked...)
}

// runLoad runs workers that each write rows with ids of their own until stop
// closes, recording every acknowledged one; write returns nil for an
// acknowledged row.
func runLoad(workers int, l *ledger, stop <-chan struct{}, write func(id int) error) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				id := i*workers + w + 1
				if write(id) == nil {
					l.add(id)
				} else {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	return &wg
}

// promoteBest stops the more current of the backups and promotes it with
// args, the other backup following it; it returns the new primary's
// volume.
func promoteBest(t *testing.T, c *fstest.Cluster, args ...string) (*fstest.Proc, *fstest.BackupProc) {
	t.Helper()
	best := c.Backups[0]
	var bestSeq uint64
	for _, b := range c.Backups {
		p, err := backup.Query(t.Context(), b.Addr, fstest.TestToken, wire.TLSFiles{})
		if err != nil {
			t.Fatal(err)
		}
		if p.DurableSeq >= bestSeq {
			best, bestSeq = b, p.DurableSeq
		}
	}
	best.Cmd.Process.Signal(syscall.SIGINT)
	best.Cmd.Wait()
	var rest []string
	for _, b := range c.Backups {
		if b != best {
			rest = append(rest, "--peer", b.Addr, "--backup", b.Addr)
		}
	}
	p := fstest.StartPromote(t, best.Vol, best.Jdir, append(append(rest, "--token", fstest.TestToken), args...)...)
	return p, best
}

// requireLedger checks the promoted copy: MariaDB recovered, CHECK TABLE
// passes, every acknowledged row is there with its payload.
func requireLedger(t *testing.T, db *sql.DB, acked []int) {
	t.Helper()
	var table, op, typ, msg string
	if err := db.QueryRow("CHECK TABLE app.ledger").Scan(&table, &op, &typ, &msg); err != nil || msg != "OK" {
		t.Fatalf("CHECK TABLE: %s %s %q %v", table, typ, msg, err)
	}
	rows, err := db.Query("SELECT id, payload FROM app.ledger")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	have := map[int]string{}
	for rows.Next() {
		var id int
		var p string
		if err := rows.Scan(&id, &p); err != nil {
			t.Fatal(err)
		}
		have[id] = p
	}
	lost := 0
	for _, id := range acked {
		if have[id] != payload(id) {
			lost++
			if lost <= 5 {
				t.Errorf("acknowledged row %d lost (%q)", id, have[id])
			}
		}
	}
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged rows lost (%d rows on the promoted copy)", lost, len(acked), len(have))
	}
	t.Logf("all %d acknowledged rows on the promoted copy (%d rows there)", len(acked), len(have))
}

// requireAbsent fails if a local-only file reached a backup.
func requireAbsent(t *testing.T, vol string, names ...string) {
	t.Helper()
	for _, n := range names {
		if _, err := os.Lstat(filepath.Join(vol, n)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("local-only %s reached the backup (%v)", n, err)
		}
	}
}

// serve runs h on a free loopback address until the test ends.
func serve(t *testing.T, h http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: h}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().String()
}

// startDB starts MariaDB on vol, failing with pbfs's log if it cannot.
func startDB(t *testing.T, vol string, p *fstest.Proc) *mariadbtest.Server {
	t.Helper()
	srv, err := mariadbtest.StartErr(t.TempDir(), vol, dbArgs(vol)...)
	if err != nil {
		t.Fatalf("%v\npbfs:\n%s", err, p.Out)
	}
	t.Cleanup(func() { srv.Stop() })
	return srv
}

func ctxTimeout(d time.Duration) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), d)
}
