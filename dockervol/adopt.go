package dockervol

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/pbfs/pbfs/internal/mountinfo"
)

// A driver that starts finds each volume in one of these states:
//
//   - held by containers and served by a live pbfs mount (the previous
//     driver crashed or was restarted): adopted as it is, the containers
//     never notice;
//   - counted as held, served, but in no other mount namespace (the
//     engine's Unmount of its last containers came while no driver
//     answered, and the engine gave up): the count is stale, and the
//     volume is unmounted as the last Unmount would;
//   - held by containers, its mount dead (killed with the driver, or the
//     machine rebooted): the dead mount is cleared; the count is kept, so
//     the engine's Unmount of those containers finds the ids, and the next
//     Mount starts the volume again;
//   - held by no container but still served (the driver died between
//     starting a mount and recording it, or during the last Unmount):
//     unmounted as the last Unmount would, barrier first;
//   - neither: nothing to do.

// load removes leftovers and loads and adopts every volume.
func (d *Driver) load() error {
	names, leftovers, err := volumeNames(d.cfg.StateDir)
	if err != nil {
		return fmt.Errorf("open driver: %w", err)
	}
	for _, dir := range leftovers {
		if holdsMount(dir) {
			d.log.Error("leftover directory holds a mount; leaving it alone", "dir", dir)
			continue
		}
		d.log.Warn("removing what an interrupted create or remove left", "dir", dir)
		os.RemoveAll(dir)
	}
	for _, name := range names {
		p := paths{filepath.Join(d.cfg.StateDir, name)}
		r, err := loadRecord(p)
		if err != nil {
			d.log.Error("skipping a volume whose record cannot be read", "volume", name, "err", err)
			continue
		}
		v := &volume{p: p, rec: r}
		d.adopt(v)
		d.vols[name] = v
	}
	return nil
}

// adopt brings one volume's mount under this driver (the states above).
func (d *Driver) adopt(v *volume) {
	name, held := v.rec.Name, len(v.rec.Mounts)
	pid := findServer(v.p.journal())
	live := pid != 0 && serving(v.p)
	if live && held > 0 && !inContainers(v.p.data()) {
		d.log.Warn("no container uses the volume: the engine's unmounts were lost while no driver answered; releasing them",
			"volume", name, "mount_ids", v.rec.Mounts)
		v.rec.Mounts, held = nil, 0
	}
	switch {
	case live && held > 0:
		v.srv, v.rec.PID = adoptServer(pid), pid
		d.log.Info("adopted a running mount", "volume", name, "pid", pid, "containers", held)
	case live:
		d.log.Warn("unmounting a mount no container holds", "volume", name, "pid", pid)
		berr := d.barrier(v.p)
		serr := adoptServer(pid).stop(d.cfg.StopTimeout)
		if berr != nil || serr != nil {
			d.log.Error("unmount of a mount no container holds", "volume", name, "barrier", berr, "stop", serr)
		}
		clearDeadMount(v.p)
		v.rec.PID = 0
	default:
		if pid != 0 {
			// Alive but not serving: stuck, or still starting for a
			// driver that died. It holds the journal; stop it.
			d.log.Warn("stopping a pbfs mount that does not serve its volume", "volume", name, "pid", pid)
			adoptServer(pid).stop(d.cfg.StopTimeout)
		}
		clearDeadMount(v.p)
		if held > 0 {
			d.log.Warn("the volume's mount died while containers held it: restart them; the next mount starts it again",
				"volume", name, "mount_ids", v.rec.Mounts)
		}
		v.rec.PID = 0
	}
	if err := v.rec.save(v.p); err != nil {
		d.log.Error("save volume record", "volume", name, "err", err)
	}
}

// holdsMount reports whether something is mounted at dir or below it.
func holdsMount(dir string) bool {
	t, err := mountinfo.Read()
	if err != nil {
		return true // cannot tell: leave it
	}
	for _, m := range t {
		if mountinfo.Within(m.Point, dir) {
			return true
		}
	}
	return false
}

// inContainers reports whether a mount namespace other than the driver's
// holds the volume's mount: a container's, into which the engine bound it.
// When it cannot tell, it says yes.
func inContainers(data string) bool {
	t, err := mountinfo.Read()
	if err != nil {
		return true
	}
	m, ok := t.At(data)
	if !ok {
		return true
	}
	own, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return true
	}
	seen := map[string]bool{own: true}
	procs, _ := os.ReadDir("/proc")
	for _, e := range procs {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		ns, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "mnt"))
		if err != nil || seen[ns] {
			continue
		}
		seen[ns] = true
		if holdsDev(filepath.Join("/proc", e.Name(), "mountinfo"), m.Dev) {
			return true
		}
	}
	return false
}

// holdsDev reports whether the mount table at path shows the file system
// dev ("major:minor").
func holdsDev(path, dev string) bool {
	data, err := os.ReadFile(path)
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 2 && f[2] == dev {
			return true
		}
	}
	return false
}
