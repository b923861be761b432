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

// serveAddMember answers POST /v1/members/add: replicate to one more
// backup.
func serveAddMember(b Backend, log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		m, addr, ok := readMemberRequest(w, r, b, "add")
		if !ok {
			return
		}
		answerMemberChange(w, b, log, "add", addr, false, m.AddMember(addr))
	}
}

// serveRemoveMember answers POST /v1/members/remove: stop replicating to
// a backup. Telling the backup (bounded) is not cut short when the
// client goes away.
func serveRemoveMember(b Backend, log *slog.Logger) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		m, addr, ok := readMemberRequest(w, r, b, "remove")
		if !ok {
			return
		}
		told, err := m.RemoveMember(context.Background(), addr)
		answerMemberChange(w, b, log, "remove", addr, told, err)
	}
}

// readMemberRequest reads the backup a membership change names, or
// refuses the request: ok is false once it has answered.
func readMemberRequest(w http.ResponseWriter, r *http.Request, b Backend, op string) (m Members, addr string, ok bool) {
	m, ok = b.(Members)
	if !ok {
		http.Error(w, "this process is a backup: add and remove backups on the primary", http.StatusConflict)
		return nil, "", false
	}
	var req memberRequest
	if err := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4096)).Decode(&req); err != nil || req.Addr == "" {
		http.Error(w, op+": give the backup's address", http.StatusBadRequest)
		return nil, "", false
	}
	return m, req.Addr, true
}

// answerMemberChange answers a membership change with the backups b
// replicates to now, or with why it failed.
func answerMemberChange(w http.ResponseWriter, b Backend, log *slog.Logger, op, addr string, told bool, err error) {
	if err != nil {
		http.Error(w, err.Error(), http.StatusConflict)
		return
	}
	log.Info("membership changed by the control socket", "op", op, "backup", addr)
	writeJSON(w, MemberChange{Backups: b.Status().BackupAddrs(), Told: told})
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
