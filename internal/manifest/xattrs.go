package manifest

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// xattrDigest hashes every extended attribute of p (POSIX ACLs, user,
// trusted and security attributes), by name (entry), so it works on every
// type without opening the file: SHA-256 over the sorted names, each
// followed by its value's length and the value. A file without any gets
// the digest of nothing, never nil: nil means the other side did not say
// (a pbfs from before), and is not compared.
func xattrDigest(root *os.Root, p string) ([]byte, error) {
	dir, base := path.Split(p)
	if p == "." || base == "" {
		dir, base = ".", "."
	}
	d, err := root.OpenFile(path.Clean(dir), os.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	// "/." for the root: l*xattr would act on the /proc link itself.
	name := "/proc/self/fd/" + strconv.Itoa(int(d.Fd())) + "/" + base
	names, err := listXattrs(name)
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	h := sha256.New()
	for _, x := range names {
		v, err := getXattr(name, x)
		if errors.Is(err, unix.ENODATA) {
			continue // removed since the listing
		}
		if err != nil {
			return nil, fmt.Errorf("xattr %s: %w", x, err)
		}
		h.Write([]byte(x))
		h.Write([]byte{0})
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(v))))
		h.Write(v)
	}
	return h.Sum(nil), nil
}

func listXattrs(name string) ([]string, error) {
	for {
		n, err := unix.Llistxattr(name, nil)
		if errors.Is(err, unix.ENOTSUP) || n == 0 {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("list xattrs: %w", err)
		}
		buf := make([]byte, n)
		n, err = unix.Llistxattr(name, buf)
		if errors.Is(err, unix.ERANGE) {
			continue // grew meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("list xattrs: %w", err)
		}
		return strings.Split(strings.TrimRight(string(buf[:n]), "\x00"), "\x00"), nil
	}
}

func getXattr(name, x string) ([]byte, error) {
	for {
		n, err := unix.Lgetxattr(name, x, nil)
		if err != nil {
			return nil, err
		}
		buf := make([]byte, n)
		n, err = unix.Lgetxattr(name, x, buf)
		if errors.Is(err, unix.ERANGE) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return buf[:n], nil
	}
}
