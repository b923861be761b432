package dockervol

import (
	"context"
	"errors"
	"fmt"
	"net"
	"slices"
	"sync"

	"github.com/pbfs/pbfs/control"
)

// Mount gives the volume to the engine's mount id and returns where it is
// mounted: the first one starts the volume's pbfs mount; the others share
// it (the volume is reference-counted by id). A mount that fails leaves
// nothing mounted and the count as it was.
func (d *Driver) Mount(name, id string) (string, error) {
	v, err := d.lookup(name)
	if err != nil {
		return "", err
	}
	v.op.Lock()
	defer v.op.Unlock()
	if v.isRemoved() {
		return "", fmt.Errorf("%w %q", ErrNotFound, name)
	}
	v.mu.Lock()
	srv, held := v.srv, slices.Contains(v.rec.Mounts, id)
	v.mu.Unlock()
	if srv != nil && !alive(srv.pid) {
		d.log.Warn("the volume's pbfs mount died; starting it again", "volume", name, "pid", srv.pid)
		clearDeadMount(v.p)
		srv = nil
	}
	if srv == nil {
		clearDeadMount(v.p)
		if srv, err = d.startServer(v.p, v.rec.Options); err != nil {
			return "", fmt.Errorf("mount %s: %w", name, err)
		}
		d.log.Info("volume mounted", "volume", name, "pid", srv.pid, "for", id)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.srv = srv
	v.rec.PID = srv.pid
	if !held {
		v.rec.Mounts = append(v.rec.Mounts, id)
	}
	if err := v.rec.save(v.p); err != nil {
		return "", fmt.Errorf("mount %s: %w", name, err)
	}
	return v.p.data(), nil
}

// Unmount lets the engine's mount id go. The last one takes a barrier
// (every write the containers made is then on the volume's ack set) and
// stops the mount, which seals and ships what is left and unmounts. An id
// the volume does not hold is no error: the engine may ask twice, or ask
// after a restart of its own.
func (d *Driver) Unmount(name, id string) error {
	v, err := d.lookup(name)
	if err != nil {
		return err
	}
	v.op.Lock()
	defer v.op.Unlock()
	v.mu.Lock()
	i := slices.Index(v.rec.Mounts, id)
	if i < 0 {
		v.mu.Unlock()
		d.log.Warn("unmount of a mount id the volume does not hold", "volume", name, "id", id)
		return nil
	}
	v.rec.Mounts = slices.Delete(v.rec.Mounts, i, i+1)
	last, srv := len(v.rec.Mounts) == 0, v.srv
	if !last || srv == nil {
		err := v.rec.save(v.p)
		v.mu.Unlock()
		return err
	}
	v.mu.Unlock()
	berr := d.barrier(v.p)
	serr := srv.stop(d.cfg.StopTimeout)
	clearDeadMount(v.p)
	v.mu.Lock()
	v.srv, v.rec.PID = nil, 0
	err = v.rec.save(v.p)
	v.mu.Unlock()
	if berr != nil || serr != nil {
		// The journal holds every write; the next mount of the volume
		// resyncs the backups that lack any.
		return fmt.Errorf("unmount %s: %w: the local journal holds every write and the next mount ships them", name, errors.Join(berr, serr))
	}
	d.log.Info("volume unmounted", "volume", name)
	return err
}

// barrier asks the volume's mount for a barrier.
func (d *Driver) barrier(p paths) error {
	cl, err := control.Dial(p.journal())
	if err != nil {
		return err
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d.cfg.BarrierTimeout)
	defer cancel()
	_, err = cl.Barrier(ctx)
	return err
}

// checkBackups refuses a volume whose backups do not all answer: a typo in
// an address, or a backup not started yet, shows at creation rather than
// as barriers that never return.
func (d *Driver) checkBackups(addrs []string) error {
	errs := make([]error, len(addrs))
	var wg sync.WaitGroup
	for i, a := range addrs {
		wg.Go(func() {
			c, err := net.DialTimeout("tcp", a, d.cfg.DialTimeout)
			if err != nil {
				errs[i] = fmt.Errorf("%w: backup %s does not answer (%v): start `pbfs backup --listen %s ...` there first, or leave it out", ErrBadOption, a, err, a)
				return
			}
			c.Close()
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (v *volume) isRemoved() bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.removed
}
