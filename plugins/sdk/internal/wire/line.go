package wire

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"
)

// The barrier line is a SOCK_SEQPACKET socket pair the host makes when it
// launches a plugin: one end stays with the host, the other is the
// plugin's descriptor LineFD (named by EnvLine). A frontend's barriers go
// over it instead of the brokered gRPC connection: one packet each way,
// read where it arrives, where a unary gRPC call passes each way through
// several goroutines (its stream, the transport's writer, the server's
// handler), and each of those hand-offs can wake a thread. On the 2-vCPU
// test machines that took about 1 ms per barrier (docs/PLUGINS.md).
//
// A request is one packet: the call's id (8 bytes, little-endian) and
// what to do (1): LineBarrier, or LineCancel for a call whose caller gave
// up. A reply is one packet: the id (8), the seq (8), a code (1) and,
// for a failure, a message (at most MaxLineMessage bytes).

// EnvLine names, in a plugin's environment, the descriptor of its end of
// the barrier line. A plugin started without it (an older host, the SDK's
// in-process test harness) takes its barriers over gRPC.
const EnvLine = "PBFS_PLUGIN_BARRIER_FD"

// LineFD is the descriptor the plugin's end has: the first of
// exec.Cmd.ExtraFiles.
const LineFD = 3

// Reply codes.
const (
	LineOK      byte = iota // the barrier returned seq
	LineFailed              // the host could not make the writes durable (sdk.ErrBarrier)
	LineNoHost              // the frontend is not started, or the host is going away (sdk.ErrHostGone)
	lineMaxCode             // first invalid code
)

// Request ops.
const (
	LineBarrier byte = iota // take a barrier and reply
	LineCancel              // the caller of this id gave up: stop waiting for its barrier
	lineMaxOp               // first invalid op
)

// Packet sizes: a request, and a reply without its message.
const (
	requestSize = 9
	replyHeader = 17
)

// MaxLineMessage bounds a failure's message in a reply.
const MaxLineMessage = 1024

// ErrLine is a malformed packet on the barrier line.
var ErrLine = errors.New("malformed barrier line packet")

// LineReply is one answered barrier.
type LineReply struct {
	ID   uint64
	Seq  uint64
	Code byte
	Msg  string
}

// AppendRequest appends a request packet (op for call id) to dst.
func AppendRequest(dst []byte, id uint64, op byte) []byte {
	return append(binary.LittleEndian.AppendUint64(dst, id), op)
}

// ParseRequest reads a request packet.
func ParseRequest(p []byte) (id uint64, op byte, err error) {
	if len(p) != requestSize {
		return 0, 0, fmt.Errorf("barrier request of %d bytes: %w", len(p), ErrLine)
	}
	if p[8] >= lineMaxOp {
		return 0, 0, fmt.Errorf("barrier request op %d: %w", p[8], ErrLine)
	}
	return binary.LittleEndian.Uint64(p), p[8], nil
}

// AppendReply appends r's packet to dst, cutting a long message.
func AppendReply(dst []byte, r LineReply) []byte {
	dst = binary.LittleEndian.AppendUint64(dst, r.ID)
	dst = binary.LittleEndian.AppendUint64(dst, r.Seq)
	dst = append(dst, r.Code)
	return append(dst, r.Msg[:min(len(r.Msg), MaxLineMessage)]...)
}

// ParseReply reads a reply packet.
func ParseReply(p []byte) (LineReply, error) {
	if len(p) < replyHeader || len(p) > replyHeader+MaxLineMessage {
		return LineReply{}, fmt.Errorf("barrier reply of %d bytes: %w", len(p), ErrLine)
	}
	r := LineReply{ID: binary.LittleEndian.Uint64(p), Seq: binary.LittleEndian.Uint64(p[8:]), Code: p[16], Msg: string(p[17:])}
	if r.Code >= lineMaxCode {
		return LineReply{}, fmt.Errorf("barrier reply code %d: %w", r.Code, ErrLine)
	}
	return r, nil
}

// MaxLinePacket is a buffer large enough for any packet on the line.
const MaxLinePacket = replyHeader + MaxLineMessage

// LinePair makes the two ends of a barrier line: the host's, as a
// connection, and the plugin's, as a file to hand to exec.Cmd.ExtraFiles
// (the caller closes it once the plugin started).
func LinePair() (*net.UnixConn, *os.File, error) {
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("barrier line: %w", err)
	}
	host := os.NewFile(uintptr(fds[0]), "pbfs-barrier-line-host")
	defer host.Close() // FileConn holds a duplicate
	plugin := os.NewFile(uintptr(fds[1]), "pbfs-barrier-line")
	c, err := LineConn(host)
	if err != nil {
		plugin.Close()
		return nil, nil, err
	}
	return c, plugin, nil
}

// LineConn makes a connection of one end of a barrier line (the caller
// still closes f).
func LineConn(f *os.File) (*net.UnixConn, error) {
	c, err := net.FileConn(f)
	if err != nil {
		return nil, fmt.Errorf("barrier line: %w", err)
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, fmt.Errorf("barrier line: descriptor is a %T, not a unix socket: %w", c, ErrLine)
	}
	return uc, nil
}

// LineConns makes both ends of a barrier line as connections: for a host
// and a plugin in one process (the SDK's tests).
func LineConns() (host, plugin *net.UnixConn, err error) {
	host, end, err := LinePair()
	if err != nil {
		return nil, nil, err
	}
	defer end.Close()
	if plugin, err = LineConn(end); err != nil {
		host.Close()
		return nil, nil, err
	}
	return host, plugin, nil
}
