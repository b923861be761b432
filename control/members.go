package control

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
)

// Members is what a Backend that can change its backups while it runs
// offers (a primary): POST /v1/members/add and /v1/members/remove. A
// Backend without it (a backup) refuses both.
type Members interface {
	AddMember(addr string) error
	// RemoveMember reports whether the backup confirmed it can no longer
	// be promoted alone (replicate.Primary.RemoveBackup).
	RemoveMember(ctx context.Context, addr string) (told bool, err error)
}

type memberRequest struct {
	Addr string `json:"addr"`
}

// MemberChange is the answer to a membership change.
type MemberChange struct {
	Backups []string `json:"backups"`
	// Told: a removed backup confirmed it can no longer be promoted alone.
	Told bool `json:"told,omitempty"`
}

// handleMembers serves the membership endpoints of b.
func handleMembers(mux *http.ServeMux, b Backend, log *slog.Logger) {
	change := func(op string, do func(Members, string) (bool, error)) http.HandlerFunc {
		return func(w http.ResponseWriter, r *http.Request) {
			m, ok := b.(Members)
			if !ok {
				http.Error(w, "this process is a backup: add and remove backups on the primary", http.StatusConflict)
				return
			}
			var req memberRequest
			if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil || req.Addr == "" {
				http.Error(w, op+": give the backup's address", http.StatusBadRequest)
				return
			}
			told, err := do(m, req.Addr)
			if err != nil {
				http.Error(w, err.Error(), http.StatusConflict)
				return
			}
			log.Info("membership changed by the control socket", "op", op, "backup", req.Addr)
			writeJSON(w, MemberChange{Backups: b.Status().BackupAddrs(), Told: told})
		}
	}
	mux.HandleFunc("POST /v1/members/add", change("add", func(m Members, addr string) (bool, error) {
		return false, m.AddMember(addr)
	}))
	mux.HandleFunc("POST /v1/members/remove", change("remove", func(m Members, addr string) (bool, error) {
		return m.RemoveMember(context.Background(), addr)
	}))
}

// BackupAddrs lists the backups st names.
func (st Status) BackupAddrs() []string {
	out := []string{}
	for _, b := range st.Backups {
		out = append(out, b.Addr)
	}
	return out
}

// AddBackup asks the primary to start replicating to addr; the backup
// joins the ack set once it has caught up.
func (c *Client) AddBackup(ctx context.Context, addr string) (MemberChange, error) {
	return c.member(ctx, "add", addr)
}

// RemoveBackup asks the primary to stop replicating to addr.
func (c *Client) RemoveBackup(ctx context.Context, addr string) (MemberChange, error) {
	return c.member(ctx, "remove", addr)
}

func (c *Client) member(ctx context.Context, op, addr string) (MemberChange, error) {
	var out MemberChange
	resp, err := c.post(ctx, "/v1/members/"+op, memberRequest{Addr: addr})
	if err != nil {
		return out, fmt.Errorf("%s backup %s: %w", op, addr, err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return out, fmt.Errorf("%s backup %s: %w", op, addr, err)
	}
	return out, nil
}
