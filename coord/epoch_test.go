package coord

import (
	"context"
	"math"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/pbfs/pbfs/internal/etcdtest"
	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/backup"
	"github.com/pbfs/pbfs/replicate/replpb"
)

// helloAs is a token holder's Hello of epoch to the backup at addr, over
// gRPC; it returns the backup's answer.
func helloAs(t *testing.T, addr string, epoch uint64) *replpb.BackupMsg {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	must(t, err)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer t")
	s, err := replpb.NewReplicationClient(conn).Stream(ctx)
	must(t, err)
	must(t, s.Send(&replpb.PrimaryMsg{Msg: &replpb.PrimaryMsg_Hello{Hello: &replpb.Hello{VolumeId: "vol-1", Epoch: epoch}}}))
	m, err := s.Recv()
	must(t, err)
	return m
}

// TestNodeBackupTakesOnlyIssuedEpochs: a node's backup admits a primary
// whose epoch etcd recorded a term of, or that is the current term, and
// refuses any other above its own, however small the step; a journal
// holding an epoch no term can take goes back to the current term's when
// the backup role opens it.
func TestNodeBackupTakesOnlyIssuedEpochs(t *testing.T) {
	c := etcdtest.Start(t, 1)
	eps := strings.Split(strings.TrimPrefix(c.Endpoints(), "etcd://"), ",")
	dir := t.TempDir()
	vol, jdir := filepath.Join(dir, "vol"), filepath.Join(dir, "j")
	must(t, os.Mkdir(vol, 0o755))
	n, err := Open(Config{Endpoints: eps, Name: "a", Listen: "127.0.0.1:0"})
	must(t, err)
	t.Cleanup(func() { n.Close() })
	n.cfg.Mount.Mountpoint, n.cfg.Mount.Journal, n.cfg.Backup.Token = vol, jdir, "t"
	ctx := context.Background()
	_, err = n.cli.Put(ctx, n.k.epoch(), "5")
	must(t, err)
	serve := func() (*backup.Backup, string) {
		b, err := backup.Open(n.backupConfig(ctx))
		must(t, err)
		t.Cleanup(func() { b.Close() })
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		must(t, err)
		go b.Serve(ln)
		return b, ln.Addr().String()
	}
	b, addr := serve()
	if m := helloAs(t, addr, 5); m.GetWelcome() == nil {
		t.Fatalf("epoch 5, the current term with no record: %v", m)
	}
	if m := helloAs(t, addr, 6); !strings.Contains(m.GetReject().GetReason(), "etcd records no term 6") {
		t.Fatalf("epoch 6, which no election issued: %v", m)
	}
	_, err = n.cli.Put(ctx, n.k.term(6), encode(Term{Epoch: 6, Primary: "b", Starting: []string{}}))
	must(t, err)
	if m := helloAs(t, addr, 6); m.GetWelcome() == nil {
		t.Fatalf("epoch 6, recorded: %v", m)
	}
	if got := b.Status().Epoch; got != 6 {
		t.Fatalf("epoch %d, want 6", got)
	}
	must(t, b.Close())

	// An earlier version stored 2^64-1 from a Hello.
	st, err := journal.OpenStore(jdir, journal.StoreOptions{})
	must(t, err)
	must(t, st.SetEpoch(math.MaxUint64))
	must(t, st.Close())
	_, err = n.cli.Put(ctx, n.k.epoch(), "6")
	must(t, err)
	b, addr = serve()
	if got := b.Status().Epoch; got != 6 {
		t.Fatalf("epoch %d after the backup role opened a journal holding 2^64-1, want the current term's, 6", got)
	}
	if m := helloAs(t, addr, 6); m.GetWelcome() == nil {
		t.Fatalf("the primary of term 6 after the repair: %v", m)
	}
}

// TestElectionRefusesAnEpochNoTermCanFollow: a member reporting an epoch
// an earlier version stored from a Hello, with no term after it, elects
// nobody (the next epoch would wrap round to 0) and says why.
func TestElectionRefusesAnEpochNoTermCanFollow(t *testing.T) {
	c := newCandidate(t)
	c.report(t, Member{Name: "b", Epoch: math.MaxUint64, Fenced: 5})
	if w := c.elect(t); w != nil {
		t.Fatalf("elected at epoch %d after a report of epoch 2^64-1", w.epoch)
	}
	c.n.mu.Lock()
	refused := c.n.refused
	c.n.mu.Unlock()
	if !strings.Contains(refused, "no term can follow") {
		t.Fatalf("refusal %q", refused)
	}
}
