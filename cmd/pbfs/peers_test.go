package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/replicate/replpb"
)

// Hostile peers on a real backup's port, each a small client here that
// speaks the wire format, while a real primary replicates through it.

// rawCodec sends a []byte as a call's message, as is.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return *v.(*[]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// peakRSS is the most memory a process has held (VmHWM), in bytes.
func peakRSS(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	must(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if kb, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var n int64
			fmt.Sscan(kb, &n)
			return n << 10
		}
	}
	t.Fatal("no VmHWM")
	return 0
}

// TestBackupReadsNothingBeforeTheToken: four Report calls of 256 MiB
// each, two without a token and two with a wrong one, are refused
// before the backup reads them: its memory stays where it was, and the
// primary replicates through it all the while.
func TestBackupReadsNothingBeforeTheToken(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil)
	b := c.Backups[0]
	must(t, os.WriteFile(filepath.Join(c.Vol, "before"), []byte("one"), 0o644))
	c.WaitApplied(c.Barrier())
	before := peakRSS(t, b.Cmd.Process.Pid)

	huge := bytes.Repeat([]byte{0x0a}, 256<<20) // a field that claims the rest
	conn, err := grpc.NewClient(b.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(t, err)
	defer conn.Close()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if i%2 == 1 {
				ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer wrong")
			}
			var out []byte
			errs[i] = conn.Invoke(ctx, replpb.Replication_Report_FullMethodName, &huge, &out, grpc.ForceCodec(rawCodec{}))
		})
	}
	for i := 0; i < 20; i++ { // the primary replicates meanwhile
		must(t, os.WriteFile(filepath.Join(c.Vol, fmt.Sprintf("during%d", i)), []byte("two"), 0o644))
		c.Barrier()
	}
	wg.Wait()
	for i, err := range errs {
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("call %d: %v, want Unauthenticated", i, err)
		}
	}
	if b.Cmd.ProcessState != nil {
		t.Fatalf("the backup exited:\n%s", b.Out)
	}
	if after := peakRSS(t, b.Cmd.Process.Pid); after > before+64<<20 {
		t.Errorf("the backup's peak memory went from %d MiB to %d MiB: it read a call without the token", before>>20, after>>20)
	}
	c.RequireConverged()
	if n := fstest.MetricSum(controlMetrics(t, b.Jdir), "pbfs_backup_auth_failures_total", ""); n != 4 {
		t.Errorf("pbfs_backup_auth_failures_total %v, want 4", n)
	}
}

// h2Conn opens a connection that speaks HTTP/2 as gRPC's clients do and,
// with path set, makes one call (an empty message) with the token given
// ("": none). answered is closed when the call is answered, closed when
// the backup closes the connection.
func h2Conn(t *testing.T, addr, path, token string) (answered, closed <-chan struct{}) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	must(t, err)
	t.Cleanup(func() { c.Close() })
	io.WriteString(c, http2.ClientPreface)
	fr := http2.NewFramer(c, c)
	// Writes fail once the backup turned the connection away: closed
	// says so.
	fr.WriteSettings()
	if path != "" {
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		fields := []hpack.HeaderField{{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "http"}, {Name: ":path", Value: path},
			{Name: ":authority", Value: addr}, {Name: "content-type", Value: "application/grpc"}, {Name: "te", Value: "trailers"}}
		if token != "" {
			fields = append(fields, hpack.HeaderField{Name: "authorization", Value: "Bearer " + token})
		}
		for _, f := range fields {
			enc.WriteField(f)
		}
		fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true})
		fr.WriteData(1, true, []byte{0, 0, 0, 0, 0})
	}
	ans, end := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(end)
		once := sync.OnceFunc(func() { close(ans) })
		defer once()
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if h, ok := f.(*http2.HeadersFrame); ok && h.StreamID == 1 {
				once()
			}
		}
	}()
	return ans, end
}

// fdWatch samples how many descriptors pid holds until stop, and returns
// the most it saw.
func fdWatch(pid int, stop <-chan struct{}) <-chan int {
	most := make(chan int, 1)
	go func() {
		top := 0
		for {
			if fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid)); err == nil {
				top = max(top, len(fds))
			}
			select {
			case <-stop:
				most <- top
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	return most
}

// TestIdlePeersLeaveTheJournalItsDescriptors: with the backup's
// descriptor limit at 400, 500 connections without the token (half of
// them making a call without it) and then 500 that show it and idle are
// held against it, while the primary creates files through it. The
// backup closes the first within seconds and holds no more of the second
// than its descriptors allow after a reserve: its journal and volume
// never run out, nothing stalls, and each kind of closing is logged once
// every 10 s, not once a connection.
func TestIdlePeersLeaveTheJournalItsDescriptors(t *testing.T) {
	c := fstest.NewCluster(t, 1, nil)
	b := c.Backups[0]
	pid := b.Cmd.Process.Pid
	if out, err := exec.Command("prlimit", "--pid", fmt.Sprint(pid), "--nofile=400:400").CombinedOutput(); err != nil {
		t.Fatalf("prlimit: %v: %s", err, out)
	}
	stop := make(chan struct{})
	most := fdWatch(pid, stop)
	start := time.Now()
	files := 0
	write := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			for range 20 {
				must(t, os.WriteFile(filepath.Join(c.Vol, fmt.Sprintf("f%d", files)), []byte("x"), 0o644))
				files++
			}
			c.Barrier()
		}
	}

	var closes []<-chan struct{}
	for i := range 500 {
		path := ""
		if i%2 == 1 {
			path = replpb.Replication_Report_FullMethodName
		}
		_, closed := h2Conn(t, b.Addr, path, "")
		closes = append(closes, closed)
	}
	opened := time.Now()
	write(3 * time.Second)
	for i, closed := range closes {
		select {
		case <-closed:
		case <-time.After(time.Until(opened.Add(5*time.Second + 3*time.Second))):
			t.Fatalf("connection %d without the token still open 8 s after it was made", i)
		}
	}
	for range 500 { // one after the other: each shows the token before the next
		answered, _ := h2Conn(t, b.Addr, replpb.Replication_Report_FullMethodName, fstest.TestToken)
		select {
		case <-answered:
		case <-time.After(10 * time.Second):
			t.Fatal("a call with the token was neither answered nor turned away")
		}
	}
	write(3 * time.Second)
	close(stop)
	elapsed := time.Since(start)

	if strings.Contains(b.Out.String(), "too many open files") {
		t.Fatalf("the backup ran out of descriptors:\n%s", b.Out)
	}
	if top := <-most; top > 400-32 {
		t.Errorf("the backup held %d descriptors of its 400: the reserve was spent", top)
	}
	c.RequireConverged()
	metrics := controlMetrics(t, b.Jdir)
	for _, k := range []struct{ reason, line string }{
		{"auth_timeout", "did not show the token"},
		{"unauthenticated_limit", "closed the oldest connection"},
		{"descriptor_limit", "turned a connection away"},
	} {
		if fstest.MetricSum(metrics, "pbfs_backup_connections_closed_total", k.reason) == 0 {
			t.Errorf("no connection closed for %s", k.reason)
		}
		if n, most := strings.Count(b.Out.String(), k.line), 1+int(elapsed/(10*time.Second)); n < 1 || n > most {
			t.Errorf("%d log lines %q in %v, want 1 to %d", n, k.line, elapsed.Round(time.Second), most)
		}
	}
	if n, most := strings.Count(b.Out.String(), "refused a caller"), 1+int(elapsed/(10*time.Second)); n < 1 || n > most {
		t.Errorf("%d log lines for 250 refused callers in %v, want 1 to %d", n, elapsed.Round(time.Second), most)
	}
	t.Logf("%d files created meanwhile", files)
}
