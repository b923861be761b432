// Package fstest holds the helpers pbfs's tests share: a real FUSE mount in
// a temporary directory that is unmounted in Cleanup, a byte-for-byte tree
// comparison, and a replay of the mount's journal onto a copy of the
// volume's starting state.
package fstest
