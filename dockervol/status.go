package dockervol

import (
	"context"
	"fmt"
	"time"

	"github.com/pbfs/pbfs/control"
)

// Info is what the engine shows of a volume (`docker volume inspect`).
type Info struct {
	Name       string
	Mountpoint string // "" while not mounted
	CreatedAt  time.Time
	Status     map[string]any
}

// Get describes a volume: its options and mounts and, while it is
// mounted, its replication as its mount reports it (backups, their lag,
// the last seq).
func (d *Driver) Get(name string) (Info, error) {
	v, err := d.lookup(name)
	if err != nil {
		return Info{}, err
	}
	v.mu.Lock()
	info := Info{Name: name, CreatedAt: v.rec.CreatedAt, Status: map[string]any{
		"options":    v.rec.Options,
		"containers": len(v.rec.Mounts),
		"journal":    v.p.journal(),
		"mounted":    v.srv != nil,
	}}
	if v.srv != nil {
		info.Mountpoint = v.p.data()
		info.Status["pid"] = v.srv.pid
	}
	mounted := v.srv != nil
	v.mu.Unlock()
	if !mounted {
		return info, nil
	}
	if err := replication(v.p, info.Status); err != nil {
		info.Status["error"] = err.Error()
	}
	return info, nil
}

// List describes every volume, without asking the mounts.
func (d *Driver) List() []Info {
	var out []Info
	for _, n := range d.Names() {
		v, err := d.lookup(n)
		if err != nil {
			continue
		}
		v.mu.Lock()
		i := Info{Name: n, CreatedAt: v.rec.CreatedAt}
		if v.srv != nil {
			i.Mountpoint = v.p.data()
		}
		v.mu.Unlock()
		out = append(out, i)
	}
	return out
}

// backupInfo is one backup in a volume's status.
type backupInfo struct {
	Addr       string `json:"addr"`
	State      string `json:"state"`
	AckedSeq   uint64 `json:"acked_seq"`
	LagBatches uint64 `json:"lag_batches"`
	LagBytes   int64  `json:"lag_bytes"`
	LagAge     string `json:"lag_age"`
}

// replication adds the mount's view of its replication to status.
func replication(p paths, status map[string]any) error {
	cl, err := control.Dial(p.journal())
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	st, err := cl.Status(ctx)
	if err != nil {
		return fmt.Errorf("status of the volume's mount: %w", err)
	}
	status["last_seq"] = st.LastSeq
	status["epoch"] = st.Epoch
	status["acks"] = st.Acks
	backups := []backupInfo{}
	for _, b := range st.Backups {
		backups = append(backups, backupInfo{Addr: b.Addr, State: b.State, AckedSeq: b.AckedSeq,
			LagBatches: b.LagBatches, LagBytes: b.LagBytes, LagAge: b.LagAge.Round(time.Millisecond).String()})
	}
	status["backups"] = backups
	if st.UncleanStart {
		status["unclean_start"] = true
	}
	return nil
}
