package mount

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/fs"
)

// ErrAborted: the mount was stopped by force (Abort) while the service
// still used it; its journal stays marked open, so the next mount resyncs
// every backup from the volume.
var ErrAborted = errors.New("mount aborted: the journal stays marked open and the next mount resyncs the backups")

// Close unmounts (lazily if the volume is busy), seals what is left into
// the journal and closes it. It waits for the service to close its files
// on the volume, since those keep being served; Abort ends that wait. If
// the journal is refusing batches, writers waiting for room are failed
// with EIO first: they would otherwise wait forever, and so would Close.
func (m *Mount) Close() error {
	// A new mount of the volume may wait for this one from now on
	// (lock.go); the mount table still refuses it while this is mounted.
	m.lock.stopping()
	m.stopPlugins()
	var fp stopPrint
	if m.committer.Holding() {
		m.fs.Refuse(syscall.EIO)
	} else {
		// Unmounted from outside already, the volume is printed as
		// found, and what changed as the mount went may not have come
		// through it (offline.go).
		fp = m.printBeforeStop(m.srv.GoneAt())
	}
	done := make(chan error, 1)
	go func() { done <- m.srv.Unmount() }()
	var err error
	select {
	case err = <-done:
	case <-time.After(5 * time.Second):
		m.log.Warn("waiting for the service to close its files on the volume; stop it, or signal pbfs again to stop by force")
		err = <-done
	}
	m.cancel()
	<-m.runDone
	if m.primary != nil {
		m.shipFinal()
		m.primary.Close()
	}
	switch held := m.committer.Held(); {
	case held > 0:
		// The journal stays marked open, so the next mount treats the
		// volume as ahead of it and resyncs every backup.
		err = errors.Join(err, fmt.Errorf("unmount: %d captured ops of the last batch never reached the journal: %w", held, ErrNotJournaled))
	case m.aborted.Load():
		err = errors.Join(err, ErrAborted)
	case err == nil:
		err = m.closeClean(fp)
	}
	if cerr := <-m.ctlDone; cerr != nil {
		m.log.Warn("control socket", "err", cerr)
	}
	m.bg.Wait() // retention, before the store closes
	if serr := m.store.Close(); err == nil {
		err = serr
	}
	m.fs.Close()
	m.log.Info("unmounted", "mountpoint", m.cfg.Mountpoint, "last_seq", m.store.Last().Seq)
	if m.cfg.BeforeUnlock != nil {
		m.cfg.BeforeUnlock()
	}
	m.lock.release()
	return err
}

// finalShipWait bounds how long a stop waits for the backups to hold the
// last batch.
const finalShipWait = 5 * time.Second

// shipFinal waits until every backup that is up and in step holds the
// journal's last batch, the one the stop sealed: the backups then hold
// every write the mount took. One that does not within finalShipWait
// catches up at the next mount.
func (m *Mount) shipFinal() {
	if m.aborted.Load() {
		return
	}
	last := m.store.Last().Seq
	for deadline := time.Now().Add(finalShipWait); ; time.Sleep(5 * time.Millisecond) {
		var behind []string
		for _, b := range m.primary.Status() {
			if b.Up && !b.Stale && b.AckedSeq < last {
				behind = append(behind, b.Addr)
			}
		}
		if len(behind) == 0 {
			return
		}
		if time.Now().After(deadline) {
			m.log.Warn("backups do not hold the last batch after the stop's wait; they catch up at the next mount",
				"last_seq", last, "backups", strings.Join(behind, ","), "waited", finalShipWait)
			return
		}
	}
}

// closeClean records a clean stop: the fingerprint of the volume as pbfs
// leaves it (offline.go), then the journal marked closed.
func (m *Mount) closeClean(fp stopPrint) error {
	// What the service's fsyncs sent only to the backups (the replicated
	// policy) reaches this disk now, before the journal says clean.
	if err := unix.Syncfs(m.fs.RootFd()); err != nil {
		m.log.Warn("could not sync the volume's file system; the next mount resyncs the backups", "err", err)
		return fmt.Errorf("sync the volume: %w", err)
	}
	if err := m.recordOffline(fp); err != nil {
		m.log.Warn("no fingerprint of the volume recorded; the next mount resyncs the backups", "err", err)
	}
	return m.store.MarkClosed()
}

// Abort stops a Close that waits for the service: the FUSE connection is
// aborted (the service's open files on the volume fail with ENOTCONN from
// then on) and writers waiting for room fail with EIO. What was captured
// is still sealed into the journal, but the journal stays marked open.
func (m *Mount) Abort() {
	m.aborted.Store(true)
	m.fs.Refuse(syscall.EIO)
	if err := m.srv.Abort(); errors.Is(err, fs.ErrConnectionEnded) {
		m.log.Info("nothing to abort: the FUSE connection has ended")
	} else if err != nil {
		m.log.Error("abort the FUSE connection", "err", err)
	}
}
