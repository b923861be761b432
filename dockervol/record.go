package dockervol

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/pbfs/pbfs/control"
)

// A volume lives in a directory of the state directory named after it:
//
//	NAME/volume.json  the record below, replaced atomically
//	NAME/data         the volume's files, and where its pbfs mount serves them
//	NAME/journal      the mount's journal (and control socket)
//	NAME/mount.log    what the volume's pbfs mount processes logged
//
// A volume being created or removed is a directory whose name starts with
// a dot; the driver removes what such a directory holds when it starts.

const (
	recordFile = "volume.json"
	dataDir    = "data"
	journalDir = "journal"
	logFile    = "mount.log"
)

// record is what the driver keeps of a volume across its restarts.
type record struct {
	Name      string    `json:"name"`
	Options   Options   `json:"options"` // merged with the defaults at creation
	CreatedAt time.Time `json:"created_at"`
	// Mounts are the engine's mount IDs that hold the volume: its
	// reference count. The volume is mounted while any does.
	Mounts []string `json:"mounts,omitempty"`
	// PID is the pbfs mount serving the volume, 0 when it is not mounted.
	PID int `json:"pid,omitempty"`
}

// validName is what Docker accepts as a named volume's name.
var validName = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]+$`)

// checkName refuses a name the state directory cannot hold.
func checkName(state, name string) error {
	if !validName.MatchString(name) {
		return fmt.Errorf("%w: volume name %q: use letters, digits, _, . and -, starting with a letter or digit", ErrBadOption, name)
	}
	if _, err := control.SocketPath(filepath.Join(state, name, journalDir)); err != nil {
		return fmt.Errorf("%w: volume name %q is too long for the state directory %s: %v", ErrBadOption, name, state, err)
	}
	return nil
}

// paths of one volume.
type paths struct{ dir string }

func (p paths) record() string  { return filepath.Join(p.dir, recordFile) }
func (p paths) data() string    { return filepath.Join(p.dir, dataDir) }
func (p paths) journal() string { return filepath.Join(p.dir, journalDir) }
func (p paths) log() string     { return filepath.Join(p.dir, logFile) }

// loadRecord reads a volume's record.
func loadRecord(p paths) (*record, error) {
	data, err := os.ReadFile(p.record())
	if err != nil {
		return nil, fmt.Errorf("read volume record: %w", err)
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("read volume record %s: %w", p.record(), err)
	}
	return &r, nil
}

// save replaces the record on disk: a new file synced and renamed over the
// old one, then the directory synced, so a crash leaves one or the other.
func (r *record) save(p paths) error {
	data, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	tmp := p.record() + ".tmp"
	if err := writeSynced(tmp, data); err != nil {
		return fmt.Errorf("save volume record: %w", err)
	}
	if err := os.Rename(tmp, p.record()); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("save volume record: %w", err)
	}
	return syncDir(p.dir)
}

func writeSynced(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
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
	return err
}

func syncDir(dir string) error {
	f, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	defer f.Close()
	if err := f.Sync(); err != nil {
		return fmt.Errorf("sync %s: %w", dir, err)
	}
	return nil
}

// createVolume makes a volume's directory with its record, atomically: it
// is built under a hidden name and renamed into place.
func createVolume(state string, r *record) error {
	tmp, err := os.MkdirTemp(state, "."+r.Name+".creating-")
	if err != nil {
		return fmt.Errorf("create volume %s: %w", r.Name, err)
	}
	fail := func(err error) error {
		os.RemoveAll(tmp)
		return fmt.Errorf("create volume %s: %w", r.Name, err)
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return fail(err)
	}
	p := paths{tmp}
	// The data directory is reached by the containers' uids.
	if err := os.Mkdir(p.data(), 0o755); err != nil {
		return fail(err)
	}
	if err := os.Mkdir(p.journal(), 0o700); err != nil {
		return fail(err)
	}
	if err := r.save(p); err != nil {
		return fail(err)
	}
	final := filepath.Join(state, r.Name)
	if err := os.Rename(tmp, final); err != nil {
		if errors.Is(err, os.ErrExist) || errors.Is(err, syscall.ENOTEMPTY) {
			err = fmt.Errorf("%w: a volume of that name appeared meanwhile", ErrExists)
		}
		return fail(err)
	}
	return syncDir(state)
}

// removeVolume removes a volume's directory: renamed to a hidden name
// first, so a crash midway leaves no half-removed volume in the list.
func removeVolume(state, name string) error {
	gone, err := os.MkdirTemp(state, "."+name+".removing-")
	if err != nil {
		return fmt.Errorf("remove volume %s: %w", name, err)
	}
	os.Remove(gone)
	if err := os.Rename(filepath.Join(state, name), gone); err != nil {
		return fmt.Errorf("remove volume %s: %w", name, err)
	}
	if err := syncDir(state); err != nil {
		return fmt.Errorf("remove volume %s: %w", name, err)
	}
	if err := os.RemoveAll(gone); err != nil {
		return fmt.Errorf("remove volume %s: %w", name, err)
	}
	return nil
}

// volumeNames lists the state directory's volumes, and its leftovers: the
// hidden directories of creations and removals a crash interrupted.
func volumeNames(state string) (names, leftovers []string, err error) {
	ents, err := os.ReadDir(state)
	if err != nil {
		return nil, nil, fmt.Errorf("list volumes: %w", err)
	}
	for _, e := range ents {
		switch {
		case !e.IsDir():
		case strings.HasPrefix(e.Name(), "."):
			leftovers = append(leftovers, filepath.Join(state, e.Name()))
		default:
			names = append(names, e.Name())
		}
	}
	slices.Sort(names)
	return names, leftovers, nil
}
