// Package health answers what a load balancer and an alerting system ask
// of a pbfs process: is it alive (/healthz), does it serve its role
// (/readyz), and which role, term and progress it is at (Prometheus
// gauges beside the process's own metrics).
package health

import (
	"encoding/json"
	"net/http"
	"strings"
)

// Roles a Report names.
const (
	RolePrimary = "primary"
	RoleBackup  = "backup"
	// RoleNone: a `pbfs node` between roles (an election is due or under
	// way), or a process that has not taken its role yet.
	RoleNone = "none"
)

// Report is a process's answer at one moment.
type Report struct {
	Role string `json:"role"`
	// Ready: the process serves its role. A primary: its mount is up, its
	// journal takes batches and a barrier can return (enough backups of
	// the ack set are up). A backup: a primary's stream is up and it
	// applies what it holds.
	Ready bool `json:"ready"`
	// Problems: why it is not ready, each in words with the remedy.
	Problems []string `json:"problems,omitempty"`
	Epoch    uint64   `json:"epoch"`
	// LastSeq: the newest batch in the journal (a backup: durable).
	LastSeq uint64 `json:"last_seq"`
	// AppliedSeq: a backup's newest batch applied to its copy.
	AppliedSeq uint64 `json:"applied_seq,omitempty"`
	// Lag: a primary's backups, each with the batches it does not hold yet.
	Lag map[string]uint64 `json:"lag_batches,omitempty"`
}

// Source reports the process's state; it is called once per request or
// scrape, so it must not block on the disk or the network.
type Source func() Report

// Judge fills Ready from Problems: ready when there are none.
func (r Report) Judge() Report {
	r.Ready = len(r.Problems) == 0
	return r
}

// Handle adds GET /healthz and GET /readyz to mux. detail says whether a
// request may see the report's details (its role, problems and progress);
// others get the status code and one word, which is all a load balancer
// reads.
//
// /healthz answers 200 while the process serves HTTP at all: liveness,
// never a reason to restart a primary that is waiting for its backups.
// /readyz answers 200 when the process serves its role, 503 otherwise.
func Handle(mux *http.ServeMux, src Source, detail func(*http.Request) bool) {
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		if !detail(r) {
			word(w, http.StatusOK, "alive")
			return
		}
		rep := src()
		writeJSON(w, http.StatusOK, struct {
			Alive bool   `json:"alive"`
			Role  string `json:"role"`
		}{true, rep.Role})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		rep := src()
		code := http.StatusOK
		if !rep.Ready {
			code = http.StatusServiceUnavailable
		}
		if !detail(r) {
			word(w, code, map[bool]string{true: "ready", false: "not ready"}[rep.Ready])
			return
		}
		writeJSON(w, code, rep)
	})
}

func word(w http.ResponseWriter, code int, s string) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	w.Write([]byte(s + "\n"))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// Summary is a report's problems in one line, for logs.
func (r Report) Summary() string {
	if r.Ready {
		return "ready"
	}
	return "not ready: " + strings.Join(r.Problems, "; ")
}
