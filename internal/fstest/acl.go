package fstest

import "encoding/binary"

// POSIX ACL entry tags, and the id of the entries that name none.
const (
	ACLUserObj  = 0x01
	ACLUser     = 0x02
	ACLGroupObj = 0x04
	ACLGroup    = 0x08
	ACLMask     = 0x10
	ACLOther    = 0x20
	ACLNoID     = 0xffffffff
)

// ACL encodes a POSIX ACL as the kernel keeps it in system.posix_acl_*:
// a version, then (tag, perm, id) entries, which must come sorted by tag
// and id. Entries are given as tag, perm, id triples, so tests need no
// setfacl.
func ACL(entries ...uint32) []byte {
	b := binary.LittleEndian.AppendUint32(nil, 2)
	for i := 0; i+2 < len(entries); i += 3 {
		b = binary.LittleEndian.AppendUint16(b, uint16(entries[i]))
		b = binary.LittleEndian.AppendUint16(b, uint16(entries[i+1]))
		b = binary.LittleEndian.AppendUint32(b, entries[i+2])
	}
	return b
}
