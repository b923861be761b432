package wire

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
)

// FuzzRawFrames: whatever bytes a peer sends, the frame reader returns
// messages no larger than the limit or an error, and never panics.
func FuzzRawFrames(f *testing.F) {
	b, _, err := journal.Encode(&journal.Batch{Seq: 1, Epoch: 1, Ops: []journal.Op{{Kind: journal.KindCreate, Path: "x", Mode: 0o644}}})
	if err != nil {
		f.Fatal(err)
	}
	enc, _ := proto.Marshal(&replpb.PrimaryMsg{Msg: &replpb.PrimaryMsg_Batch{Batch: &replpb.Batch{Seq: 1, Encoded: b}}})
	f.Add(append(binary.BigEndian.AppendUint32(nil, uint32(len(enc))), enc...))
	f.Add([]byte{0, 0, 0, 0})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 1})
	f.Fuzz(func(t *testing.T, data []byte) {
		fc := &frameConn{r: bufio.NewReader(bytes.NewReader(data))}
		for range 64 {
			var pm replpb.PrimaryMsg
			if err := fc.readMsg(&pm, MaxFrame); err != nil {
				if !errors.Is(err, ErrFrame) && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
					t.Fatalf("unclassified error: %v", err)
				}
				return
			}
			if proto.Size(&pm) > MaxFrame {
				t.Fatalf("a message of %d bytes passed the limit", proto.Size(&pm))
			}
		}
	})
}

// TestTokenFrameIsReadAlone: a raw stream's opening reads the token
// frame and not a byte past it before the token is checked; what the
// peer sent after it is still unread when a wrong token is refused.
func TestTokenFrameIsReadAlone(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	after := bytes.Repeat([]byte("after the token "), 64)
	go func() {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			return
		}
		defer c.Close()
		io.ReadFull(c, make([]byte, len(Magic)))
		c.Write(append(append(binary.BigEndian.AppendUint32(nil, 5), "wrong"...), after...)) // one segment

		io.Copy(io.Discard, c)
	}()
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := Accept(c, nil, "right", func(string) {}); err == nil {
		t.Fatal("a wrong token was taken")
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	got := make([]byte, len(after))
	if _, err := io.ReadFull(c, got); err != nil || !bytes.Equal(got, after) {
		t.Fatalf("what followed the token frame: %q, %v; the opening read past the token frame", got, err)
	}
}
