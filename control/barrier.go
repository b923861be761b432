package control

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// Barriers are what a client asks for most, one after another, and each
// waits on the answer: Client.Barrier talks HTTP/1.1 on connections of
// its own instead of through net/http's transport, which hands every
// request and response between goroutines (about 80 µs per barrier on an
// idle 2-vCPU test machine, more under load). The wire is the same POST
// /v1/barrier the server answers for any client.

// maxIdleBarrierConns bounds the connections a Client keeps for barriers.
const maxIdleBarrierConns = 4

// barrierConn is one connection kept for barriers.
type barrierConn struct {
	c  net.Conn
	br *bufio.Reader
}

// errStale: no answer came on a connection, which for a kept one may mean
// the server closed it meanwhile (its idle timeout). A barrier is safe to
// ask again.
var errStale = errors.New("no answer on the connection")

// barrier asks for one barrier at path (with its query).
func (c *Client) barrier(ctx context.Context, path string) (uint64, error) {
	for {
		bc, reused, err := c.takeBarrierConn(ctx)
		if err != nil {
			return 0, err
		}
		seq, keep, err := bc.ask(ctx, path)
		if keep && err == nil {
			c.putBarrierConn(bc)
		} else {
			bc.c.Close()
		}
		if errors.Is(err, errStale) && reused && ctx.Err() == nil {
			continue // the next try dials afresh once the idle ones are used up
		}
		return seq, err
	}
}

func (c *Client) takeBarrierConn(ctx context.Context) (*barrierConn, bool, error) {
	select {
	case bc := <-c.idle:
		return bc, true, nil
	default:
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", c.socket)
	if err != nil {
		return nil, false, reachErr(err)
	}
	return &barrierConn{c: conn, br: bufio.NewReader(conn)}, false, nil
}

func (c *Client) putBarrierConn(bc *barrierConn) {
	select {
	case c.idle <- bc:
	default:
		bc.c.Close()
	}
}

// ask sends one request and reads its answer; keep reports whether the
// connection may carry another.
func (bc *barrierConn) ask(ctx context.Context, path string) (seq uint64, keep bool, err error) {
	if d, ok := ctx.Deadline(); ok {
		bc.c.SetDeadline(d)
	} else {
		bc.c.SetDeadline(time.Time{})
	}
	// ctx ending unblocks the read (its error is then ctx's).
	stop := context.AfterFunc(ctx, func() { bc.c.SetDeadline(time.Unix(1, 0)) })
	defer func() {
		if !stop() {
			keep = false
			if err != nil {
				err = ctx.Err()
			}
		}
	}()
	// Until an answer arrives, a failure may be a kept connection the
	// server closed: the caller may ask again on another.
	if _, err := io.WriteString(bc.c, "POST "+path+" HTTP/1.1\r\nHost: pbfs\r\nContent-Length: 0\r\n\r\n"); err != nil {
		return 0, false, fmt.Errorf("%w: %v", errStale, err)
	}
	resp, err := http.ReadResponse(bc.br, nil)
	if err != nil {
		return 0, false, fmt.Errorf("%w: %v", errStale, err)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	resp.Body.Close()
	if err != nil {
		return 0, false, err
	}
	keep = !resp.Close
	if resp.StatusCode != http.StatusOK {
		return 0, keep, answerErr(body)
	}
	var out struct{ Seq uint64 }
	if err := json.Unmarshal(body, &out); err != nil {
		return 0, false, err
	}
	return out.Seq, keep, nil
}

// closeBarrierConns closes the connections kept for barriers.
func (c *Client) closeBarrierConns() {
	for {
		select {
		case bc := <-c.idle:
			bc.c.Close()
		default:
			return
		}
	}
}
