package proxy

import (
	"bytes"
	"fmt"
	"io"
	"os"
)

// spool reads a whole upstream response body, in memory up to memLimit
// bytes and in an unlinked temporary file beyond, so the response can be
// held while its barrier runs without holding an upstream connection.
func spool(r io.Reader, memLimit int64) (io.ReadCloser, int64, error) {
	buf, err := io.ReadAll(io.LimitReader(r, memLimit+1))
	if err != nil {
		return nil, 0, fmt.Errorf("read upstream body: %w", err)
	}
	if int64(len(buf)) <= memLimit {
		return io.NopCloser(bytes.NewReader(buf)), int64(len(buf)), nil
	}
	f, err := os.CreateTemp("", "pbfs-proxy-spool-")
	if err != nil {
		return nil, 0, fmt.Errorf("spool upstream body: %w", err)
	}
	os.Remove(f.Name()) // gone once closed, whatever happens
	n, err := f.Write(buf)
	if err == nil {
		var m int64
		m, err = io.Copy(f, r)
		n += int(m)
	}
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("spool upstream body: %w", err)
	}
	return f, int64(n), nil
}
