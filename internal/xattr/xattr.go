// Package xattr reads extended attributes by name, without following a
// final symlink (the l*xattr calls), whole: it sizes the buffer from the
// kernel and tries again if an attribute grew in between.
package xattr

import (
	"errors"
	"fmt"
	"os"
	"path"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// List returns the names of the extended attributes at path. A file
// system that keeps none answers an empty list, not an error. Errors are
// the syscall's, unwrapped, as Get's.
func List(path string) ([]string, error) {
	for {
		n, err := unix.Llistxattr(path, nil)
		if errors.Is(err, unix.ENOTSUP) || (err == nil && n == 0) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		buf := make([]byte, n)
		n, err = unix.Llistxattr(path, buf)
		if errors.Is(err, unix.ERANGE) {
			continue // one was added meanwhile
		}
		if err != nil {
			return nil, err
		}
		if n == 0 {
			return nil, nil
		}
		return strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00"), nil
	}
}

// Get returns the value of attribute name at path. The errors are the
// syscall's, unwrapped, so that callers can tell ENODATA (no such
// attribute) and ENOTSUP (no attributes here) with errors.Is.
func Get(path, name string) ([]byte, error) {
	for {
		n, err := unix.Lgetxattr(path, name, nil)
		if err != nil {
			return nil, err
		}
		buf := make([]byte, n)
		n, err = unix.Lgetxattr(path, name, buf)
		if errors.Is(err, unix.ERANGE) {
			continue // it grew meanwhile
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}

// All returns every extended attribute at path, by name. One removed
// between the listing and its read is left out.
func All(path string) (map[string][]byte, error) {
	names, err := List(path)
	if err != nil || len(names) == 0 {
		return nil, err
	}
	out := make(map[string][]byte, len(names))
	for _, name := range names {
		v, err := Get(path, name)
		if errors.Is(err, unix.ENODATA) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("xattr %s: %w", name, err)
		}
		out[name] = v
	}
	return out, nil
}

// Entry names p, inside root, for the l*xattr calls:
// /proc/self/fd/N/base, with N the parent directory opened in root, so
// the name stays inside root and short whatever p's length. The kernel
// follows the descriptor's link to that directory and never the final
// name, so the call stays on p itself, whatever its type. For the
// directory itself the name ends in "/.": the calls would otherwise act on
// the /proc magic link, not on what it names, and fail with EPERM (a
// setxattr on the volume's root stalled every backup so). done closes the
// directory.
func Entry(root *os.Root, p string) (name string, done func(), err error) {
	dir, base := path.Split(p)
	if p == "." || base == "" {
		dir, base = ".", "."
	}
	d, err := root.OpenFile(path.Clean(dir), os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return "", nil, err
	}
	return "/proc/self/fd/" + strconv.Itoa(int(d.Fd())) + "/" + base, func() { d.Close() }, nil
}
