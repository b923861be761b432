package proxy

import (
	"bytes"
	"fmt"
	"io"
	"os"
)

// spool reads a whole body, in memory up to memLimit bytes and in an
// unlinked temporary file beyond: an upstream response, so it can be held
// while its barrier runs without holding an upstream connection, and a
// client's request body, before it takes one (bufferBody).
func spool(r io.Reader, memLimit int64) (io.ReadCloser, int64, error) {
	buf, err := io.ReadAll(io.LimitReader(r, memLimit+1))
	if err != nil {
		return nil, 0, fmt.Errorf("read body: %w", err)
	}
	if int64(len(buf)) <= memLimit {
		return io.NopCloser(bytes.NewReader(buf)), int64(len(buf)), nil
	}
	f, err := os.CreateTemp("", "pbfs-proxy-spool-")
	if err != nil {
		return nil, 0, &spoolError{err}
	}
	os.Remove(f.Name()) // gone once closed, whatever happens
	w := &recordingWriter{w: f}
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
		f.Close()
		if w.err != nil {
			return nil, 0, &spoolError{w.err}
		}
		return nil, 0, fmt.Errorf("read body: %w", err)
	}
	return f, int64(n), nil
}

// spoolError is a failure of this machine's (a full or unwritable temp
// directory), not the service's: the service answered.
type spoolError struct{ err error }

func (e *spoolError) Error() string { return "spool the response: " + e.err.Error() }
func (e *spoolError) Unwrap() error { return e.err }

// recordingWriter keeps the first error of the writes, to tell them from
// the reads in an io.Copy.
type recordingWriter struct {
	w   io.Writer
	err error
}

func (r *recordingWriter) Write(p []byte) (int, error) {
	n, err := r.w.Write(p)
	if err != nil && r.err == nil {
		r.err = err
	}
	return n, err
}
