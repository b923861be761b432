package manifest

import (
	"crypto/sha256"
	"encoding/binary"
	"maps"
	"os"
	"slices"

	"github.com/pbfs/pbfs/internal/xattr"
)

// xattrDigest hashes every extended attribute of p (POSIX ACLs, user,
// trusted and security attributes), by name (entry), so it works on every
// type without opening the file: SHA-256 over the sorted names, each
// followed by its value's length and the value. A file without any gets
// the digest of nothing, never nil: nil means the other side did not say
// (a pbfs from before), and is not compared.
func xattrDigest(root *os.Root, p string) ([]byte, error) {
	name, done, err := xattr.Entry(root, p)
	if err != nil {
		return nil, err
	}
	defer done()
	all, err := xattr.All(name)
	if err != nil {
		return nil, err
	}
	h := sha256.New()
	for _, x := range slices.Sorted(maps.Keys(all)) {
		h.Write([]byte(x))
		h.Write([]byte{0})
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(all[x]))))
		h.Write(all[x])
	}
	return h.Sum(nil), nil
}
