package control

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/internal/manifest"
	"github.com/pbfs/pbfs/journal"
)

// Client talks to a running mount's control socket.
type Client struct {
	http   *http.Client
	socket string
	idle   chan *barrierConn // connections kept for Barrier (barrier.go)
}

// Dial returns a client for the mount serving journalDir.
func Dial(journalDir string) (*Client, error) {
	p, err := SocketPath(journalDir)
	if err != nil {
		return nil, err
	}
	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", p)
	}}
	return &Client{http: &http.Client{Transport: tr}, socket: p, idle: make(chan *barrierConn, maxIdleBarrierConns)}, nil
}

// Close closes the client's idle connections to the daemon.
func (c *Client) Close() {
	c.http.CloseIdleConnections()
	c.closeBarrierConns()
}

func (c *Client) do(ctx context.Context, method, path string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, method, "http://pbfs"+path, nil)
	if err != nil {
		return nil, err
	}
	return c.send(req)
}

// post sends body as JSON.
func (c *Client) post(ctx context.Context, path string, body any) (*http.Response, error) {
	b, err := json.Marshal(body)
	if err != nil {
		return nil, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://pbfs"+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.send(req)
}

func (c *Client) send(req *http.Request) (*http.Response, error) {
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, reachErr(err)
	}
	if resp.StatusCode != http.StatusOK {
		defer resp.Body.Close()
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		return nil, answerErr(msg)
	}
	return resp, nil
}

// reachErr is ErrNoMount when no mount serves the socket.
func reachErr(err error) error {
	if errors.Is(err, syscall.ENOENT) || errors.Is(err, syscall.ECONNREFUSED) {
		return ErrNoMount
	}
	return err
}

// maxErrorBody bounds what is read of a refusal's body.
const maxErrorBody = 4096

// answerErr is a refusal's body as an error: the daemon's own words.
func answerErr(body []byte) error { return errors.New(strings.TrimSpace(string(body))) }

// Barrier asks the mount for a barrier and returns its seq. With a
// deadline on ctx, the mount gives up a little before it and says why
// (which backups are missing, in what state) instead of the client
// seeing only its own timeout.
func (c *Client) Barrier(ctx context.Context) (uint64, error) {
	path := "/v1/barrier"
	if d, ok := ctx.Deadline(); ok {
		left := time.Until(d)
		path += "?timeout=" + (left - min(time.Second, left/10)).String()
	}
	seq, err := c.barrier(ctx, path)
	if err != nil {
		return 0, fmt.Errorf("barrier: %w", err)
	}
	return seq, nil
}

// Manifest asks the mount for the volume's manifest (only paths, if
// given).
func (c *Client) Manifest(ctx context.Context, paths []string) (map[string]manifest.Entry, error) {
	resp, err := c.post(ctx, "/v1/manifest", newPathsRequest(paths))
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	defer resp.Body.Close()
	out, err := decodeManifest(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("manifest: %w", err)
	}
	return out, nil
}

// decodeManifest reads a manifest sent as one JSON entry per line, with a
// last line {"error": ...} if the listing failed.
func decodeManifest(r io.Reader) (map[string]manifest.Entry, error) {
	out := map[string]manifest.Entry{}
	dec := json.NewDecoder(r)
	for {
		var raw json.RawMessage
		if err := dec.Decode(&raw); errors.Is(err, io.EOF) {
			return out, nil
		} else if err != nil {
			return nil, err
		}
		var line struct {
			Error string `json:"error"`
		}
		if err := json.Unmarshal(raw, &line); err != nil {
			return nil, err
		}
		if line.Error != "" {
			return nil, errors.New(line.Error)
		}
		var e manifest.Entry
		if err := json.Unmarshal(raw, &e); err != nil {
			return nil, err
		}
		out[e.Path] = e
	}
}

// Compare asks the mount for paths on the primary and on every backup,
// all as of one batch (Backend.Compare).
func (c *Client) Compare(ctx context.Context, paths []string) (Comparison, error) {
	var out Comparison
	resp, err := c.post(ctx, "/v1/compare", newPathsRequest(paths))
	if err != nil {
		return out, fmt.Errorf("compare: %w", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return out, fmt.Errorf("compare: %w", err)
	}
	out.Primary = manifest.Rekey(out.Primary)
	for i := range out.Backups {
		out.Backups[i].Entries = manifest.Rekey(out.Backups[i].Entries)
	}
	return out, nil
}

// Resync asks the mount to resync the backups at addrs now (none: every
// backup).
func (c *Client) Resync(ctx context.Context, addrs ...string) error {
	resp, err := c.post(ctx, "/v1/resync", resyncRequest{Backups: addrs})
	if err != nil {
		return fmt.Errorf("resync: %w", err)
	}
	return resp.Body.Close()
}

// Status returns the mount's status.
func (c *Client) Status(ctx context.Context) (Status, error) {
	var st Status
	resp, err := c.do(ctx, http.MethodGet, "/v1/status")
	if err != nil {
		return st, fmt.Errorf("status: %w", err)
	}
	defer resp.Body.Close()
	err = json.NewDecoder(resp.Body).Decode(&st)
	return st, err
}

// Metrics returns the mount's metrics in the Prometheus text format.
func (c *Client) Metrics(ctx context.Context) (string, error) {
	resp, err := c.do(ctx, http.MethodGet, "/metrics")
	if err != nil {
		return "", fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// Get fetches one encoded batch.
func (c *Client) Get(seq uint64) ([]byte, error) {
	resp, err := c.do(context.Background(), http.MethodGet, fmt.Sprintf("/v1/batches/%d", seq))
	if err != nil {
		if what := fmt.Sprintf("get batch %d", seq); !strings.Contains(err.Error(), what) {
			err = fmt.Errorf("%s: %w", what, err) // the mount's answer names it already
		}
		return nil, err
	}
	defer resp.Body.Close()
	return io.ReadAll(resp.Body)
}

// Scan streams every encoded batch from seq from on.
func (c *Client) Scan(from uint64, fn func(seq uint64, enc []byte) error) error {
	resp, err := c.do(context.Background(), http.MethodGet, fmt.Sprintf("/v1/batches?from=%d", from))
	if err != nil {
		return fmt.Errorf("scan batches: %w", err)
	}
	defer resp.Body.Close()
	var hdr [12]byte
	for {
		if _, err := io.ReadFull(resp.Body, hdr[:]); err != nil {
			return fmt.Errorf("scan batches: stream cut short: %w", err)
		}
		seq, n := binary.BigEndian.Uint64(hdr[:8]), binary.BigEndian.Uint32(hdr[8:])
		if seq == 0 && n == 0 {
			return nil
		}
		if n > journal.HeaderSize+journal.MaxBodySize {
			return fmt.Errorf("scan batches: frame of %d bytes: %w", n, journal.ErrTooLarge)
		}
		enc := make([]byte, n)
		if _, err := io.ReadFull(resp.Body, enc); err != nil {
			return fmt.Errorf("scan batches: %w", err)
		}
		if err := fn(seq, enc); err != nil {
			return err
		}
	}
}
