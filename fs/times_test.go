package fs_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/fstest"
	"github.com/pbfs/pbfs/mount"
)

// Times before 1970 and past 2262 read back through the mount as they were
// set (clamped, past 2262, to the journal's range: an int64 of
// nanoseconds), and replay to the same. A time before 1970 used to read a
// second and a bit late through the mount while the replica had it right,
// and one in 2500 wrapped to 1915.
func TestTimesOutsideTheEpochsUsualRange(t *testing.T) {
	e := fstest.Setup(t, mount.Config{}, nil)
	max := time.Unix(0, 1<<63-1)
	for i, c := range []struct{ set, want time.Time }{
		{time.Date(1960, 1, 1, 0, 0, 0, 123456789, time.UTC), time.Date(1960, 1, 1, 0, 0, 0, 123456789, time.UTC)},
		{time.Unix(0, -1), time.Unix(0, -1)},
		{time.Unix(-1, 999999999), time.Unix(-1, 999999999)},
		{time.Date(2200, 7, 4, 12, 0, 0, 5, time.UTC), time.Date(2200, 7, 4, 12, 0, 0, 5, time.UTC)},
		{time.Date(2400, 1, 1, 0, 0, 0, 0, time.UTC), max},
	} {
		p := filepath.Join(e.Vol, "f"+string(rune('a'+i)))
		must(t, os.WriteFile(p, nil, 0o644))
		ts := unix.NsecToTimespec(0)
		ts.Sec, ts.Nsec = c.set.Unix(), int64(c.set.Nanosecond())
		must(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{ts, ts}, 0))
		var st unix.Stat_t
		must(t, unix.Stat(p, &st))
		if got := time.Unix(st.Mtim.Unix()); !got.Equal(c.want) {
			t.Errorf("mtime set to %v reads %v through the mount, want %v", c.set, got.UTC(), c.want.UTC())
		}
	}
	e.CheckReplay()
}
