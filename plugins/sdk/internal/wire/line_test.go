package wire

import (
	"errors"
	"testing"
)

func TestLineRoundTrip(t *testing.T) {
	for _, r := range []LineReply{{ID: 1, Seq: 2}, {ID: 1<<64 - 1, Code: LineFailed, Msg: "backup b1 is down"}, {ID: 3, Code: LineNoHost, Msg: "x"}} {
		got, err := ParseReply(AppendReply(nil, r))
		if err != nil || got != r {
			t.Errorf("%+v came back as %+v, %v", r, got, err)
		}
	}
	long := LineReply{ID: 1, Code: LineFailed, Msg: string(make([]byte, 3*MaxLineMessage))}
	if got, err := ParseReply(AppendReply(nil, long)); err != nil || len(got.Msg) != MaxLineMessage {
		t.Errorf("a long message: %d bytes back, %v; want it cut to %d", len(got.Msg), err, MaxLineMessage)
	}
	if id, op, err := ParseRequest(AppendRequest(nil, 42, LineCancel)); err != nil || id != 42 || op != LineCancel {
		t.Errorf("a cancel of 42 came back as %d, op %d, %v", id, op, err)
	}
	for _, p := range [][]byte{nil, make([]byte, 8), make([]byte, 10), AppendRequest(nil, 1, 7)} {
		if _, _, err := ParseRequest(p); !errors.Is(err, ErrLine) {
			t.Errorf("a %d-byte request: %v, want ErrLine", len(p), err)
		}
	}
	bad := AppendReply(nil, LineReply{ID: 1})
	bad[16] = 9
	for _, p := range [][]byte{nil, make([]byte, replyHeader-1), make([]byte, MaxLinePacket+1), bad} {
		if _, err := ParseReply(p); !errors.Is(err, ErrLine) {
			t.Errorf("a %d-byte reply: %v, want ErrLine", len(p), err)
		}
	}
}

// FuzzLinePackets: any packet either fails to parse with ErrLine or
// parses into something that encodes back to the same bytes.
func FuzzLinePackets(f *testing.F) {
	f.Add(AppendRequest(nil, 7, LineBarrier))
	f.Add(AppendReply(nil, LineReply{ID: 7, Seq: 9, Code: LineFailed, Msg: "no"}))
	f.Fuzz(func(t *testing.T, p []byte) {
		if id, op, err := ParseRequest(p); err == nil {
			if string(AppendRequest(nil, id, op)) != string(p) {
				t.Fatalf("request %x parsed as %d, op %d", p, id, op)
			}
		} else if !errors.Is(err, ErrLine) {
			t.Fatalf("request %x: %v", p, err)
		}
		if r, err := ParseReply(p); err == nil {
			if string(AppendReply(nil, r)) != string(p) {
				t.Fatalf("reply %x parsed as %+v", p, r)
			}
		} else if !errors.Is(err, ErrLine) {
			t.Fatalf("reply %x: %v", p, err)
		}
	})
}
