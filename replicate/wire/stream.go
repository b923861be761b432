package wire

import (
	"bufio"
	"context"
	"crypto/subtle"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/proto"

	"github.com/pbfs/pbfs/journal"
	"github.com/pbfs/pbfs/replicate/replpb"
)

// The raw stream carries the replication stream's messages (Hello,
// Welcome, Batch, Ack, Reject: replicate.proto) without gRPC: each message
// is one frame, a 4-byte big-endian length and the protobuf bytes, on a
// TCP connection of its own to the backup's port. Every barrier crosses
// the stream twice; over gRPC each crossing went through HTTP/2 framing and
// a hand-off to a writer goroutine on one side and from a reader goroutine
// on the other (docs/PERFORMANCE.md). Resync, Report and Manifest stay on
// gRPC.
//
// Opening, in order (docs/ARCHITECTURE.md, "Replication"):
//   - the primary sends Magic and the backup answers it (a backup
//     without the raw stream, whose gRPC server reads it as a broken
//     HTTP/2 preface, answers anything else, and the primary falls back to
//     the gRPC stream);
//   - TLS, when configured, as on gRPC (mutual, TLS 1.3);
//   - the primary's token, in a frame of its own, checked in constant time
//     and answered with an empty BackupMsg, or with a Reject and the
//     connection closed;
//   - Hello, at most MaxHelloFrame, then Welcome, Batches and Acks, as on
//     gRPC.
//
// The backup reads nothing larger than the token frame before the token,
// and nothing larger than a Hello before the Hello; the opening, Hello
// included, has rawHandshake in all.

// Magic opens a raw stream, both ways. gRPC's own first bytes are the
// HTTP/2 preface ("PRI * HTTP/2.0") or a TLS record (0x16), so the two
// never meet.
const Magic = "PBFSRS1\n"

const (
	// MaxFrame bounds a message frame: a batch at its largest, as the
	// gRPC stream's message limit does.
	MaxFrame = journal.HeaderSize + journal.MaxBodySize + 1024
	// maxTokenFrame bounds the token frame.
	maxTokenFrame = 4096
	// MaxHelloFrame bounds the Hello: a few dozen bytes now, room for
	// what later versions add.
	MaxHelloFrame = 64 << 10
	// rawHandshake bounds the opening (magic, TLS, token) on both sides.
	rawHandshake = 10 * time.Second
	// keepBuf is the largest write or read buffer a raw stream keeps
	// between messages; larger batches get one of their own.
	keepBuf = 1 << 20
)

// Heartbeat is how often a backup acks with nothing new, and Silence how
// long a primary waits for a word before it ends the stream (gRPC's
// keepalive pinged every 10 s and waited 5 s).
const (
	Heartbeat = 5 * time.Second
	Silence   = 20 * time.Second
)

// Errors of the raw stream.
var (
	// ErrNoRaw: the backup does not speak the raw stream.
	ErrNoRaw = errors.New("backup does not speak the raw stream")
	// ErrFrame: a peer sent a frame that breaks the raw stream's format.
	ErrFrame = errors.New("malformed raw stream frame")
)

// frameConn reads and writes length-prefixed frames on a connection. One
// reader and one writer may use it at once.
type frameConn struct {
	c    net.Conn
	r    *bufio.Reader
	wmu  sync.Mutex
	wbuf []byte
	rbuf []byte
}

func newFrameConn(c net.Conn) *frameConn {
	return &frameConn{c: c, r: bufio.NewReaderSize(c, 64<<10)}
}

// writeFrame sends b as one frame (the token frame).
func (f *frameConn) writeFrame(b []byte) error {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	out := binary.BigEndian.AppendUint32(f.wbuf[:0], uint32(len(b)))
	f.wbuf = append(out, b...)
	_, err := f.c.Write(f.wbuf)
	return err
}

// writeMsg sends m as one frame, in one write.
func (f *frameConn) writeMsg(m proto.Message) error {
	f.wmu.Lock()
	defer f.wmu.Unlock()
	b, err := proto.MarshalOptions{}.MarshalAppend(append(f.wbuf[:0], 0, 0, 0, 0), m)
	if err != nil {
		return fmt.Errorf("encode message: %w", err)
	}
	if len(b)-4 > MaxFrame {
		return fmt.Errorf("send a message of %d bytes, over %d: %w", len(b)-4, MaxFrame, ErrFrame)
	}
	binary.BigEndian.PutUint32(b, uint32(len(b)-4))
	_, err = f.c.Write(b)
	if cap(b) <= keepBuf {
		f.wbuf = b[:0]
	}
	return err
}

// readFrame returns the next frame's bytes, valid until the next read.
func (f *frameConn) readFrame(limit int) ([]byte, error) {
	n, err := frameLen(f.r, limit)
	if err != nil {
		return nil, err
	}
	buf := f.rbuf
	if cap(buf) < n {
		buf = make([]byte, n)
		if n <= keepBuf {
			f.rbuf = buf
		}
	}
	buf = buf[:n]
	if _, err := io.ReadFull(f.r, buf); err != nil {
		return nil, noEOF(err)
	}
	return buf, nil
}

// frameLen reads a frame's length from r, at most limit.
func frameLen(r io.Reader, limit int) (int, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return 0, err
	}
	n := int(binary.BigEndian.Uint32(hdr[:]))
	if n > limit {
		return 0, fmt.Errorf("read a frame of %d bytes, over %d: %w", n, limit, ErrFrame)
	}
	return n, nil
}

// readMsg decodes the next frame, at most limit bytes, into m (protobuf
// copies what it keeps).
func (f *frameConn) readMsg(m proto.Message, limit int) error {
	b, err := f.readFrame(limit)
	if err != nil {
		return err
	}
	if err := proto.Unmarshal(b, m); err != nil {
		return fmt.Errorf("decode message: %v: %w", err, ErrFrame)
	}
	return nil
}

// noEOF makes an end inside a frame what it is: a cut connection.
func noEOF(err error) error {
	if errors.Is(err, io.EOF) {
		return io.ErrUnexpectedEOF
	}
	return err
}

// PrimaryEnd is a primary's end of the replication stream: a raw
// stream's (PrimaryStream) or gRPC's (replpb.Replication_StreamClient).
type PrimaryEnd interface {
	Send(*replpb.PrimaryMsg) error
	Recv() (*replpb.BackupMsg, error)
}

// PrimaryStream is the primary's end of a raw stream.
type PrimaryStream struct {
	*frameConn
	silence time.Duration // the Dialer's
}

// Send sends m as one frame.
func (s PrimaryStream) Send(m *replpb.PrimaryMsg) error { return s.writeMsg(m) }

// Recv fails after silence without a message: a backup sends an ack at
// least every Heartbeat, so its process is stuck (stopped, or its
// machine gone) even if its kernel still answers TCP.
func (s PrimaryStream) Recv() (*replpb.BackupMsg, error) {
	s.c.SetReadDeadline(time.Now().Add(s.silence))
	m := new(replpb.BackupMsg)
	if err := s.readMsg(m, MaxFrame); err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return nil, fmt.Errorf("no word from the backup in %v: %w", s.silence, err)
		}
		return nil, err
	}
	return m, nil
}

// BackupStream is the backup's end of a raw stream. Its first message
// ends the opening: at most MaxHelloFrame, within the opening's deadline.
type BackupStream struct {
	*frameConn
	opened bool // the first message was read
}

// Send sends m as one frame.
func (s *BackupStream) Send(m *replpb.BackupMsg) error { return s.writeMsg(m) }

// Recv reads the next message: the Hello, then batches.
func (s *BackupStream) Recv() (*replpb.PrimaryMsg, error) {
	m := new(replpb.PrimaryMsg)
	if s.opened {
		return m, s.readMsg(m, MaxFrame)
	}
	if err := s.readMsg(m, MaxHelloFrame); err != nil {
		return m, err
	}
	s.opened = true
	s.c.SetDeadline(time.Time{})
	return m, nil
}

// Dialer opens raw streams to one backup (NewDialer).
type Dialer struct {
	addr    string
	token   string
	tls     *tls.Config   // nil: no TLS
	silence time.Duration // PrimaryStream's
}

// Dial opens a raw stream, through the token; ErrNoRaw when the backup
// answers the magic with anything else, a *Refusal when it refuses the
// token. The connection closes when ctx ends.
func (d Dialer) Dial(ctx context.Context) (PrimaryStream, error) {
	nd := net.Dialer{Timeout: rawHandshake, KeepAliveConfig: rawKeepAlive, Control: setUserTimeout}
	c, err := nd.DialContext(ctx, "tcp", d.addr)
	if err != nil {
		return PrimaryStream{}, err
	}
	stop := context.AfterFunc(ctx, func() { c.Close() })
	s, err := d.Open(c)
	if err != nil {
		stop()
		c.Close()
		return PrimaryStream{}, err
	}
	return s, nil
}

// Open opens a raw stream on c, a connection to the backup, as Dial does.
func (d Dialer) Open(c net.Conn) (PrimaryStream, error) {
	fc, err := d.open(c)
	if err != nil {
		return PrimaryStream{}, err
	}
	return PrimaryStream{fc, d.silence}, nil
}

func (d Dialer) open(c net.Conn) (*frameConn, error) {
	c.SetDeadline(time.Now().Add(rawHandshake))
	if _, err := io.WriteString(c, Magic); err != nil {
		return nil, err
	}
	var got [len(Magic)]byte
	if _, err := io.ReadFull(c, got[:]); err != nil || string(got[:]) != Magic {
		return nil, fmt.Errorf("%w (answered %q, %v)", ErrNoRaw, got[:], err)
	}
	if d.tls != nil {
		tc := tls.Client(c, d.tls)
		if err := tc.Handshake(); err != nil {
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
		c = tc
	}
	fc := newFrameConn(c)
	if err := fc.writeFrame([]byte(d.token)); err != nil {
		return nil, err
	}
	var answer replpb.BackupMsg
	if err := fc.readMsg(&answer, MaxFrame); err != nil {
		return nil, fmt.Errorf("read the token's answer: %w", noEOF(err))
	}
	if rej := answer.GetReject(); rej != nil {
		return nil, &Refusal{rej}
	}
	c.SetDeadline(time.Time{})
	return fc, nil
}

// Refusal is a backup's Reject of a raw stream's token.
type Refusal struct{ Reject *replpb.Reject }

func (r *Refusal) Error() string { return r.Reject.Reason }

// Accept takes a raw stream the backup's listener recognised by its
// magic (already read) through TLS and the token. A wrong token is
// answered with a Reject; refused reports it. The opening's deadline
// stays for the Hello (BackupStream).
func Accept(c net.Conn, tlsCfg *tls.Config, token string, refused func(reason string)) (*BackupStream, error) {
	c.SetDeadline(time.Now().Add(rawHandshake))
	if _, err := io.WriteString(c, Magic); err != nil {
		return nil, err
	}
	if tlsCfg != nil {
		tc := tls.Server(c, tlsCfg)
		if err := tc.Handshake(); err != nil {
			return nil, fmt.Errorf("tls handshake: %w", err)
		}
		c = tc
	}
	// Straight from the connection, unbuffered: nothing past the token
	// frame is read before the token is checked.
	n, err := frameLen(c, maxTokenFrame)
	if err != nil {
		return nil, fmt.Errorf("read token: %w", err)
	}
	got := make([]byte, n)
	if _, err := io.ReadFull(c, got); err != nil {
		return nil, fmt.Errorf("read token: %w", noEOF(err))
	}
	fc := newFrameConn(c)
	if subtle.ConstantTimeCompare(got, []byte(token)) != 1 {
		reason := "wrong token"
		if len(got) == 0 {
			reason = "no token"
		}
		refused(reason)
		fc.writeMsg(&replpb.BackupMsg{Msg: &replpb.BackupMsg_Reject{Reject: &replpb.Reject{
			Code: replpb.Reject_UNKNOWN, Reason: "pbfs backup: " + reason}}})
		return nil, errors.New(reason)
	}
	// An empty message: go on. The primary sends nothing more until it
	// reads it, so a refused one is closed with nothing unread (a reset
	// could take the Reject with it).
	if err := fc.writeMsg(&replpb.BackupMsg{}); err != nil {
		return nil, err
	}
	return &BackupStream{frameConn: fc}, nil
}

// rawKeepAlive finds a peer that vanished (its machine lost, no reset)
// within about 20 s of silence, as the gRPC connection's keepalive did.
var rawKeepAlive = net.KeepAliveConfig{Enable: true, Idle: 10 * time.Second, Interval: 5 * time.Second, Count: 2}

// setUserTimeout bounds how long sent data may stay unacknowledged by the
// peer's kernel before the connection fails (TCP_USER_TIMEOUT), which
// keepalive does not cover while a batch is in flight.
func setUserTimeout(_, _ string, rc syscall.RawConn) error {
	var serr error
	err := rc.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.IPPROTO_TCP, unix.TCP_USER_TIMEOUT, 20000)
	})
	if err != nil {
		return err
	}
	return serr
}

// tuneAccepted gives a connection the backup accepted, raw or gRPC, the
// dialer's keepalive and user timeout: a primary whose machine vanished
// ends its session within about 20 s.
func tuneAccepted(c net.Conn) {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return
	}
	tc.SetKeepAliveConfig(rawKeepAlive)
	if rc, err := tc.SyscallConn(); err == nil {
		setUserTimeout("", "", rc)
	}
}
