package backup

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// markFile is the apply-progress file in a backup's journal directory.
const markFile = "apply.mark"

// applyMark keeps the applier's progress: before every op it overwrites
// one small record (magic, boot id, seq, op index, the rename source's
// inode) with a single pwrite, never synced. After a crash of the backup
// process the page cache still holds the record and every effect of the
// ops before it, so a restart in the same boot finishes the batch exactly
// (apply.Resume). After a reboot the record proves nothing (neither it nor
// the volume's writes were synced in order) and the old rules apply.
type applyMark struct {
	f    *os.File
	boot [36]byte
}

var markMagic = [8]byte{'P', 'B', 'F', 'S', 'M', 'R', 'K', '1'}

const markSize = 8 + 36 + 8 + 8 + 8

func openApplyMark(dir string) (*applyMark, error) {
	f, err := os.OpenFile(filepath.Join(dir, markFile), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("open apply mark: %w", err)
	}
	m := &applyMark{f: f}
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("read boot id: %w", err)
	}
	copy(m.boot[:], bytes.TrimSpace(boot))
	return m, nil
}

func (m *applyMark) write(seq uint64, index int, ino uint64) error {
	var rec [markSize]byte
	copy(rec[:8], markMagic[:])
	copy(rec[8:44], m.boot[:])
	binary.LittleEndian.PutUint64(rec[44:], seq)
	binary.LittleEndian.PutUint64(rec[52:], uint64(index))
	binary.LittleEndian.PutUint64(rec[60:], ino)
	n := nextMark()
	markFailpoint(n, false)
	if _, err := unix.Pwrite(int(m.f.Fd()), rec[:], 0); err != nil {
		return fmt.Errorf("write apply mark: %w", err)
	}
	markFailpoint(n, true)
	return nil
}

// read returns the last mark if it was written in this boot.
func (m *applyMark) read() (seq uint64, index int, ino uint64, ok bool) {
	var rec [markSize]byte
	if n, err := m.f.ReadAt(rec[:], 0); n != markSize || err != nil {
		return 0, 0, 0, false
	}
	if !bytes.Equal(rec[:8], markMagic[:]) || !bytes.Equal(rec[8:44], m.boot[:]) {
		return 0, 0, 0, false
	}
	return binary.LittleEndian.Uint64(rec[44:]), int(binary.LittleEndian.Uint64(rec[52:])), binary.LittleEndian.Uint64(rec[60:]), true
}

func (m *applyMark) close() error { return m.f.Close() }
