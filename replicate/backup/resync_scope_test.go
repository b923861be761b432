package backup

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
	"github.com/pbfs/pbfs/replicate/wire"
)

// scopedBackup serves a backup that holds batch 1 (a file "a", applied)
// and, planted in its volume, a symlink "escape" to a directory outside
// holding "victim". It returns the backup, its address, its volume and the
// outside directory.
func scopedBackup(t *testing.T) (*Backup, string, string, string) {
	t.Helper()
	b, addr, vol := startBackup(t)
	s := dial(t, addr, "right")
	hello(t, s, 1)
	msg, _ := batch(t, 1, 1, 0, journal.Op{Kind: journal.KindCreate, Fid: 2, Path: "a", Mode: 0o644})
	if err := s.Send(msg); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); b.applied.Load() < 1; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the backup did not apply batch 1")
		}
	}
	outside := t.TempDir()
	os.WriteFile(filepath.Join(outside, "victim"), []byte("untouched"), 0o644)
	os.Symlink(outside, filepath.Join(vol, "escape"))
	return b, addr, vol, outside
}

// scopedResync opens a scoped resync of the backup at addr as of seq 1 and
// returns the stream and the backup's offer.
func scopedResync(t *testing.T, addr string) (replpb.Replication_ResyncClient, *replpb.ResyncOffer) {
	t.Helper()
	conn, err := wire.DialGRPC(addr, "right", wire.TLSFiles{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	s, err := replpb.NewReplicationClient(conn).Resync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	s.Send(&replpb.ResyncPrimaryMsg{Msg: &replpb.ResyncPrimaryMsg_Start{Start: &replpb.ResyncStart{VolumeId: "vol-1", Epoch: 1, Seq: 1, BlockSize: 4096, Scoped: true}}})
	m, err := s.Recv()
	if err != nil || m.GetOffer() == nil {
		t.Fatalf("no offer: %v %v", m, err)
	}
	return s, m.GetOffer()
}

func sendScopeMsg(s replpb.Replication_ResyncClient, sc *replpb.Scope) {
	s.Send(&replpb.ResyncPrimaryMsg{Msg: &replpb.ResyncPrimaryMsg_Scope{Scope: sc}})
}

// TestScopedResyncOfAHostilePrimary: a primary's scope is checked like
// its entries. Entries before the scope, a scope path that leaves the
// volume, in the primary's first scope or in the final one, fail the
// resync: the backup stays stalled, and the next resync it offers is a
// full one. A scope through a planted symlink removes the symlink and
// nothing it points to; what lies outside the scope stays.
func TestScopedResyncOfAHostilePrimary(t *testing.T) {
	bad := [][]byte{[]byte("../outside")}
	for name, steps := range map[string]func(s replpb.Replication_ResyncClient){
		"entry before the scope": func(s replpb.Replication_ResyncClient) {
			s.Send(&replpb.ResyncPrimaryMsg{Msg: &replpb.ResyncPrimaryMsg_Entry{Entry: &replpb.Entry{Path: []byte("a"), Mode: 0o100644}}})
		},
		"first scope": func(s replpb.Replication_ResyncClient) {
			sendScopeMsg(s, &replpb.Scope{Base: 1, Subtrees: bad})
		},
		"final scope": func(s replpb.Replication_ResyncClient) {
			sendScopeMsg(s, &replpb.Scope{Base: 1})
			s.Recv()
			sendScopeMsg(s, &replpb.Scope{Subtrees: bad})
		},
	} {
		t.Run(name, func(t *testing.T) {
			b, addr, _, _ := scopedBackup(t)
			s, offer := scopedResync(t, addr)
			if offer.Full != "" || len(offer.Chain) != 1 || offer.Chain[0].Seq != 1 || offer.VolumeSeq != 1 {
				t.Fatalf("the backup's offer: %v", offer)
			}
			steps(s)
			s.Send(&replpb.ResyncPrimaryMsg{Msg: &replpb.ResyncPrimaryMsg_Done{Done: &replpb.ResyncDone{}}})
			for {
				m, err := s.Recv()
				if err != nil {
					break
				}
				if m.GetResult() != nil {
					t.Fatal("the resync succeeded")
				}
			}
			if !b.Status().Stalled {
				t.Fatal("the backup is not stalled after a failed resync")
			}
			_, offer = scopedResync(t, addr)
			if offer.Full == "" {
				t.Fatalf("after a resync that did not finish, the backup offers a targeted one: %v", offer)
			}
		})
	}
	t.Run("planted symlink", func(t *testing.T) {
		_, addr, vol, outside := scopedBackup(t)
		s, _ := scopedResync(t, addr)
		sendScopeMsg(s, &replpb.Scope{Base: 1})
		if m, err := s.Recv(); err != nil || m.GetScope() == nil || m.GetScope().Full != "" {
			t.Fatalf("the backup's scope: %v %v", m, err)
		}
		sendScopeMsg(s, &replpb.Scope{Subtrees: [][]byte{[]byte("escape")}})
		s.Send(&replpb.ResyncPrimaryMsg{Msg: &replpb.ResyncPrimaryMsg_Done{Done: &replpb.ResyncDone{}}})
		if m, err := s.Recv(); err != nil || m.GetResult() == nil {
			t.Fatalf("the resync failed: %v %v", m, err)
		}
		if data, err := os.ReadFile(filepath.Join(outside, "victim")); err != nil || string(data) != "untouched" {
			t.Fatalf("the resync reached outside the volume: %q %v", data, err)
		}
		if _, err := os.Lstat(filepath.Join(vol, "escape")); !os.IsNotExist(err) {
			t.Fatalf("the symlink the primary does not list is still there: %v", err)
		}
		if _, err := os.Stat(filepath.Join(vol, "a")); err != nil {
			t.Fatalf("a path outside the scope went: %v", err)
		}
	})
}
