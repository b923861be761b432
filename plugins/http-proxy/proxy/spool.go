package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

var (
	// errBodyTooLarge is a request body past max-body.
	errBodyTooLarge = errors.New("request body larger than max-body")
	// errSpoolFull is a body that does not fit in what is left of
	// spool-disk.
	errSpoolFull = errors.New("spool-disk is full")
)

// spooler keeps whole bodies: an upstream response, so it can be held
// while its barrier runs without holding an upstream connection, and a
// client's request body, before it takes one (bufferBody). A body of up
// to mem bytes stays in memory, a larger one goes to an unlinked
// temporary file; the files together hold at most disk bytes, and
// request bodies at most half of that, so uploads never leave no room for
// responses the service has already acted on.
type spooler struct {
	mem, disk int64
	used      atomic.Int64
	gauge     prometheus.Gauge
}

// request spools a client's body of at most max bytes (errBodyTooLarge
// past it, with nothing past it kept).
func (sp *spooler) request(r io.Reader, max int64) (io.ReadCloser, int64, error) {
	return sp.spool(&capReader{r: r, left: max}, sp.disk/2)
}

// response spools an upstream response.
func (sp *spooler) response(r io.Reader) (io.ReadCloser, int64, error) {
	return sp.spool(r, sp.disk)
}

// spool reads r whole, its file's bytes taken from the disk budget while
// the budget's use stays within limit.
func (sp *spooler) spool(r io.Reader, limit int64) (io.ReadCloser, int64, error) {
	buf, err := io.ReadAll(io.LimitReader(r, sp.mem+1))
	if err != nil {
		return nil, 0, fmt.Errorf("read body: %w", err)
	}
	if int64(len(buf)) <= sp.mem {
		return io.NopCloser(bytes.NewReader(buf)), int64(len(buf)), nil
	}
	f, err := os.CreateTemp("", "pbfs-proxy-spool-")
	if err != nil {
		return nil, 0, &spoolError{err}
	}
	os.Remove(f.Name()) // gone once closed, whatever happens
	sf := &spoolFile{File: f, sp: sp}
	w := &budgetWriter{f: sf, limit: limit}
	n, err := w.Write(buf)
	if err == nil {
		var m int64
		m, err = io.Copy(w, r)
		n += int(m)
	}
	if err == nil {
		if _, serr := f.Seek(0, io.SeekStart); serr != nil {
			w.err, err = serr, serr
		}
	}
	if err != nil {
		sf.Close()
		if w.err != nil {
			return nil, 0, &spoolError{w.err}
		}
		return nil, 0, fmt.Errorf("read body: %w", err)
	}
	return sf, int64(n), nil
}

// take reserves n bytes of the disk budget if its use stays within limit.
func (sp *spooler) take(n, limit int64) bool {
	for {
		used := sp.used.Load()
		if used+n > limit {
			return false
		}
		if sp.used.CompareAndSwap(used, used+n) {
			sp.gauge.Add(float64(n))
			return true
		}
	}
}

func (sp *spooler) give(n int64) {
	sp.used.Add(-n)
	sp.gauge.Sub(float64(n))
}

// spoolFile is a spooled body; closing it gives its bytes back.
type spoolFile struct {
	*os.File
	sp    *spooler
	taken int64
}

func (f *spoolFile) Close() error {
	err := f.File.Close()
	f.sp.give(f.taken)
	f.taken = 0
	return err
}

// budgetWriter writes to a spool file what the disk budget allows, and
// keeps the first error of the writes, to tell them from the reads in an
// io.Copy.
type budgetWriter struct {
	f     *spoolFile
	limit int64
	err   error
}

func (w *budgetWriter) Write(p []byte) (int, error) {
	if !w.f.sp.take(int64(len(p)), w.limit) {
		w.err = fmt.Errorf("%w (%d bytes of bodies spooled, this one needs more)", errSpoolFull, w.f.sp.used.Load())
		return 0, w.err
	}
	w.f.taken += int64(len(p))
	n, err := w.f.File.Write(p)
	if err != nil && w.err == nil {
		w.err = err
	}
	return n, err
}

// capReader fails with errBodyTooLarge once more than left bytes come,
// before handing any of them on.
type capReader struct {
	r    io.Reader
	left int64
}

func (c *capReader) Read(p []byte) (int, error) {
	if int64(len(p)) > c.left {
		p = p[:c.left+1]
	}
	n, err := c.r.Read(p)
	if int64(n) > c.left {
		return 0, errBodyTooLarge
	}
	c.left -= int64(n)
	return n, err
}

// spoolError is a failure of this machine's (a full or unwritable temp
// directory, or spool-disk reached), not the service's nor the client's.
type spoolError struct{ err error }

func (e *spoolError) Error() string { return "spool body: " + e.err.Error() }
func (e *spoolError) Unwrap() error { return e.err }
