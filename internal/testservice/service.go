// Package testservice is a small stateful HTTP service for tests and
// benchmarks: it keeps each POSTed body as a file in its state directory
// (fsynced, as a careful service does) and answers with "Connection:
// close", like the WordPress container in the XDN investigation, so the
// proxy in front of it has to keep clients alive on its own.
package testservice

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sync/atomic"
)

var validKey = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,128}$`)

// Service is the handler.
type Service struct {
	Dir string
	// KeepAlive, when true, stops the service from answering
	// "Connection: close".
	KeepAlive bool
	// Posts counts the POSTs the service acted on.
	Posts atomic.Int64
}

func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !s.KeepAlive {
		w.Header().Set("Connection", "close")
	}
	key := r.URL.Path[len("/kv/"):]
	if len(r.URL.Path) < 4 || r.URL.Path[:4] != "/kv/" || !validKey.MatchString(key) {
		http.Error(w, "want /kv/KEY", http.StatusNotFound)
		return
	}
	path := filepath.Join(s.Dir, key)
	switch r.Method {
	case http.MethodGet:
		data, err := os.ReadFile(path)
		if err != nil {
			http.Error(w, err.Error(), http.StatusNotFound)
			return
		}
		w.Write(data)
	case http.MethodPost:
		s.Posts.Add(1)
		body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
		if err == nil {
			err = writeFile(path, body)
		}
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusCreated)
		fmt.Fprintf(w, "stored %s (%d bytes)\n", key, len(body))
	default:
		http.Error(w, "GET or POST", http.StatusMethodNotAllowed)
	}
}

// writeFile replaces path atomically: temp file, fsync, rename.
func writeFile(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), ".tmp-")
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), path)
	}
	if err != nil {
		os.Remove(f.Name())
	}
	return err
}
