package backup

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/wire"
)

// startBackup serves a backup in-process on a loopback port.
func startBackup(t *testing.T) (*Backup, string, string) {
	t.Helper()
	return startBackupWith(t, false)
}

// startBackupWith serves a backup that, with grpcOnly, streams over gRPC
// alone, as backups from before the raw stream did.
func startBackupWith(t *testing.T, grpcOnly bool) (*Backup, string, string) {
	t.Helper()
	return startBackupOpts(t, grpcOnly)
}

// startBackupHeartbeat serves a backup whose streams ack at least every
// beat.
func startBackupHeartbeat(t *testing.T, beat time.Duration) (*Backup, string, string) {
	t.Helper()
	// Restored once the backup has closed (cleanups run last first).
	t.Cleanup(func(h time.Duration) func() { return func() { heartbeatEvery = h } }(heartbeatEvery))
	heartbeatEvery = beat
	return startBackupOpts(t, false)
}

func startBackupOpts(t *testing.T, grpcOnly bool, opts ...func(*Config)) (*Backup, string, string) {
	t.Helper()
	dir := t.TempDir()
	vol := filepath.Join(dir, "vol")
	os.Mkdir(vol, 0o755)
	cfg := Config{Volume: vol, Journal: filepath.Join(dir, "j"), Token: "right"}
	for _, o := range opts {
		o(&cfg)
	}
	b, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go b.serve(ln, !grpcOnly)
	t.Cleanup(func() { b.Close() })
	return b, ln.Addr().String(), vol
}

// transports are the two ways a primary's stream reaches a backup; the
// stream's tests run over each.
var transports = []struct {
	name string
	dial func(t *testing.T, addr, token string) wire.PrimaryEnd
}{
	{"raw", dialRaw},
	{"grpc", func(t *testing.T, addr, token string) wire.PrimaryEnd { return dial(t, addr, token) }},
}

// dialRaw opens a raw stream, through the token.
func dialRaw(t *testing.T, addr, token string) wire.PrimaryEnd {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	d, err := wire.NewDialer(addr, token, wire.TLSFiles{}, wire.Silence)
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.Dial(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// openRaw opens a raw stream on a connection of its own, which it
// returns for a test to write past the stream's frames or break it.
func openRaw(t *testing.T, addr, token string) (wire.PrimaryStream, net.Conn, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	d, err := wire.NewDialer(addr, token, wire.TLSFiles{}, wire.Silence)
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.Open(c)
	return s, c, err
}

func dial(t *testing.T, addr, token string) replpb.Replication_StreamClient {
	t.Helper()
	conn, err := wire.DialGRPC(addr, token, wire.TLSFiles{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	s, err := replpb.NewReplicationClient(conn).Stream(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func hello(t *testing.T, s wire.PrimaryEnd, epoch uint64) *replpb.BackupMsg {
	t.Helper()
	if err := s.Send(&replpb.PrimaryMsg{Msg: &replpb.PrimaryMsg_Hello{Hello: &replpb.Hello{VolumeId: "vol-1", Epoch: epoch}}}); err != nil {
		t.Fatal(err)
	}
	m, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func batch(t *testing.T, seq, epoch uint64, prev uint32, ops ...journal.Op) (*replpb.PrimaryMsg, uint32) {
	enc, h, err := journal.Encode(&journal.Batch{Seq: seq, Epoch: epoch, Prev: prev, Ops: ops})
	if err != nil {
		t.Fatal(err)
	}
	return &replpb.PrimaryMsg{Msg: &replpb.PrimaryMsg_Batch{Batch: &replpb.Batch{Seq: seq, Encoded: enc}}}, h.Checksum
}

func TestWrongTokenRefused(t *testing.T) {
	_, addr, _ := startBackup(t)
	for _, tok := range []string{"wrong", ""} {
		s := dial(t, addr, tok)
		s.Send(&replpb.PrimaryMsg{Msg: &replpb.PrimaryMsg_Hello{Hello: &replpb.Hello{VolumeId: "v", Epoch: 1}}})
		_, err := s.Recv()
		if status.Code(err) != codes.Unauthenticated {
			t.Fatalf("token %q: %v, want Unauthenticated", tok, err)
		}
	}
}

// TestStaleEpochFenced: after a primary of epoch 5, a primary of epoch 3
// is refused, at Hello and for its batches.
func TestStaleEpochFenced(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) {
			b, addr, _ := startBackup(t)
			if m := hello(t, tr.dial(t, addr, "right"), 5); m.GetWelcome() == nil {
				t.Fatalf("epoch 5: %v", m)
			}
			m := hello(t, tr.dial(t, addr, "right"), 3)
			if m.GetReject().GetCode() != replpb.Reject_STALE_EPOCH {
				t.Fatalf("epoch 3 after 5: %v, want STALE_EPOCH", m)
			}
			if b.Status().Epoch != 5 {
				t.Fatalf("epoch %d", b.Status().Epoch)
			}
		})
	}
}

// TestHostileBatchesRefused: a gap, a corrupt batch and a batch with a
// higher epoch than its session are refused and never stored; a batch that
// tries to escape the volume through a planted symlink stops the applier
// and touches nothing outside.
func TestHostileBatchesRefused(t *testing.T) {
	for _, tr := range transports {
		t.Run(tr.name, func(t *testing.T) { testHostileBatchesRefused(t, tr.dial) })
	}
}

func testHostileBatchesRefused(t *testing.T, dial func(t *testing.T, addr, token string) wire.PrimaryEnd) {
	b, addr, vol := startBackup(t)
	outside := t.TempDir()
	os.Symlink(outside, filepath.Join(vol, "escape"))

	s := dial(t, addr, "right")
	hello(t, s, 1)
	gap, _ := batch(t, 2, 1, 0, journal.Op{Kind: journal.KindCreate, Path: "x", Mode: 0o644})
	s.Send(gap)
	if m, _ := s.Recv(); m.GetReject().GetCode() != replpb.Reject_GAP {
		t.Fatalf("gap: %v", m)
	}

	s = dial(t, addr, "right")
	hello(t, s, 1)
	bad, _ := batch(t, 1, 1, 0, journal.Op{Kind: journal.KindCreate, Path: "x", Mode: 0o644})
	enc := bad.GetBatch().Encoded
	enc[len(enc)-1] ^= 1
	s.Send(bad)
	if m, _ := s.Recv(); m.GetReject().GetCode() != replpb.Reject_CORRUPT {
		t.Fatalf("corrupt: %v", m)
	}

	s = dial(t, addr, "right")
	hello(t, s, 1)
	future, _ := batch(t, 1, 9, 0, journal.Op{Kind: journal.KindCreate, Path: "x", Mode: 0o644})
	s.Send(future)
	if m, _ := s.Recv(); m.GetReject().GetCode() != replpb.Reject_CORRUPT {
		t.Fatalf("epoch above the session's: %v", m)
	}
	if b.Status().DurableSeq != 0 {
		t.Fatalf("a refused batch was stored: durable %d", b.Status().DurableSeq)
	}

	s = dial(t, addr, "right")
	hello(t, s, 1)
	escape, _ := batch(t, 1, 1, 0, journal.Op{Kind: journal.KindCreate, Path: "escape/pwned", Mode: 0o644})
	s.Send(escape)
	if m, _ := s.Recv(); m.GetAck().GetDurableSeq() != 1 {
		t.Fatalf("a well-formed batch was not acked: %v", m)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := b.WaitApplied(ctx, 1); err == nil {
		t.Fatal("a batch escaping through a symlink was applied")
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 0 {
		t.Fatalf("the batch wrote outside the volume: %v", ents)
	}
	if !b.Status().Stalled {
		t.Fatal("backup not marked stalled after a failed apply")
	}
	// The stall survives a restart: it is not mistaken for a torn batch
	// and redone tolerantly.
	b.Close()
	b2, err := Open(Config{Volume: vol, Journal: filepath.Join(filepath.Dir(vol), "j"), Token: "right"})
	if err != nil {
		t.Fatal(err)
	}
	defer b2.Close()
	if st := b2.Status(); !st.Stalled || st.AppliedSeq != 0 {
		t.Fatalf("after restart: %+v, want stalled at applied 0", st)
	}
}

// FuzzPrimaryMsg feeds arbitrary bytes to the backup's message decoding:
// protobuf, then the journal's batch verification.
func FuzzPrimaryMsg(f *testing.F) {
	m, _ := batch(&testing.T{}, 1, 1, 0, journal.Op{Kind: journal.KindCreate, Path: "x", Mode: 0o644})
	seed, _ := proto.Marshal(m)
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		var msg replpb.PrimaryMsg
		if proto.Unmarshal(data, &msg) != nil {
			return
		}
		if bt := msg.GetBatch(); bt != nil {
			if _, err := journal.Decode(bt.Encoded); err == nil {
				if _, err := journal.Verify(bt.Encoded); err != nil {
					t.Fatal("Decode accepted what Verify refuses")
				}
			} else if !errors.Is(err, journal.ErrCorrupt) && !errors.Is(err, journal.ErrVersion) && !errors.Is(err, journal.ErrTooLarge) {
				t.Fatalf("unclassified error: %v", err)
			}
		}
	})
}

// TestHostileResyncRefused: resync entries that point outside the volume
// (through "..", an absolute path or a planted symlink) fail the resync and
// touch nothing outside; the backup stays stalled, not half-synced.
func TestHostileResyncRefused(t *testing.T) {
	for _, e := range []*replpb.Entry{
		{Path: []byte("../outside"), Mode: 0o100644},
		{Path: []byte("/etc/pbfs-pwned"), Mode: 0o100644},
		{Path: []byte("escape/pwned"), Mode: 0o100644},
		{Path: []byte("ok"), Mode: 0o100644, LinkTo: []byte("escape/victim")},
	} {
		// The planted symlink makes the volume hold a file: let the first
		// resync take it, so that the entries themselves are refused.
		b, addr, vol := startBackupOpts(t, false, func(c *Config) { c.Adopt = true })
		outside := t.TempDir()
		os.WriteFile(filepath.Join(outside, "victim"), []byte("untouched"), 0o644)
		os.Symlink(outside, filepath.Join(vol, "escape"))
		conn, _ := wire.DialGRPC(addr, "right", wire.TLSFiles{})
		s, err := replpb.NewReplicationClient(conn).Resync(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		s.Send(&replpb.ResyncPrimaryMsg{Msg: &replpb.ResyncPrimaryMsg_Start{Start: &replpb.ResyncStart{VolumeId: "v", Epoch: 1, BlockSize: 4096}}})
		s.Send(&replpb.ResyncPrimaryMsg{Msg: &replpb.ResyncPrimaryMsg_Entry{Entry: e}})
		s.Send(&replpb.ResyncPrimaryMsg{Msg: &replpb.ResyncPrimaryMsg_Done{Done: &replpb.ResyncDone{}}})
		for {
			m, err := s.Recv()
			if err != nil {
				break
			}
			if m.GetResult() != nil {
				t.Fatalf("entry %q: resync succeeded", e.Path)
			}
		}
		conn.Close()
		if ents, _ := os.ReadDir(outside); len(ents) != 1 {
			t.Fatalf("entry %q touched the outside: %v", e.Path, ents)
		}
		if data, _ := os.ReadFile(filepath.Join(outside, "victim")); string(data) != "untouched" {
			t.Fatalf("entry %q changed the victim", e.Path)
		}
		if !b.Status().Stalled {
			t.Fatalf("entry %q: backup not stalled after a failed resync", e.Path)
		}
	}
}

// FuzzResyncMsg: arbitrary bytes through the resync message decoder.
func FuzzResyncMsg(f *testing.F) {
	seed, _ := proto.Marshal(&replpb.ResyncPrimaryMsg{Msg: &replpb.ResyncPrimaryMsg_Entry{Entry: &replpb.Entry{
		Path: []byte("a/b"), Mode: 0o100644, Size: 10, BlockSums: [][]byte{make([]byte, 16)}, Xattrs: []*replpb.Xattr{{Name: []byte("user.x"), Value: []byte("1")}}}}})
	f.Add(seed)
	f.Fuzz(func(t *testing.T, data []byte) {
		var msg replpb.ResyncPrimaryMsg
		if proto.Unmarshal(data, &msg) != nil {
			return
		}
		if e := msg.GetEntry(); e != nil && journal.ValidPath(string(e.Path)) && string(e.Path) != "." {
			if len(e.Path) > journal.MaxPath {
				t.Fatal("ValidPath accepted an overlong path")
			}
		}
	})
}

// A Serve that Close overtook (pbfs node starts Serve on a goroutine and
// may close the backup at once on a stop signal) refuses and closes its
// listener: nothing may answer for a closed journal.
func TestServeAfterClose(t *testing.T) {
	dir := t.TempDir()
	vol := filepath.Join(dir, "vol")
	os.Mkdir(vol, 0o755)
	b, err := Open(Config{Volume: vol, Journal: filepath.Join(dir, "j"), Token: "right"})
	if err != nil {
		t.Fatal(err)
	}
	b.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- b.Serve(ln) }()
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Fatalf("Serve after Close: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		ln.Close()
		t.Fatal("Serve after Close is serving")
	}
	if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
		c.Close()
		t.Fatal("the listener of a closed backup still accepts")
	}
}
