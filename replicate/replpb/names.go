// Package replpb holds the replication protocol's messages and service,
// generated from replicate.proto, and turns paths into its byte strings.
package replpb

import "sort"

// Names turns paths into the protocol's byte strings.
func Names(paths []string) [][]byte {
	if paths == nil {
		return nil
	}
	out := make([][]byte, len(paths))
	for i, p := range paths {
		out[i] = []byte(p)
	}
	return out
}

// Xattrs lists extended attributes by name, sorted (a map<string, bytes>
// on the wire, whose names need not be UTF-8).
func Xattrs(m map[string][]byte) []*Xattr {
	if len(m) == 0 {
		return nil
	}
	out := make([]*Xattr, 0, len(m))
	for k, v := range m {
		out = append(out, &Xattr{Name: []byte(k), Value: v})
	}
	sort.Slice(out, func(i, j int) bool { return string(out[i].Name) < string(out[j].Name) })
	return out
}

// XattrMap is the inverse of Xattrs.
func XattrMap(xs []*Xattr) map[string][]byte {
	if len(xs) == 0 {
		return nil
	}
	out := make(map[string][]byte, len(xs))
	for _, x := range xs {
		out[string(x.Name)] = x.Value
	}
	return out
}
