package manifest

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// refDigest is docs/FORMAT.md's definition of a digest, computed from the
// whole contents.
func refDigest(b []byte) []byte {
	h := sha256.New()
	var hdr [8]byte
	for off := 0; off < len(b); off += digestBlock {
		blk := b[off:min(off+digestBlock, len(b))]
		if bytes.Count(blk, []byte{0}) == len(blk) {
			continue
		}
		binary.BigEndian.PutUint64(hdr[:], uint64(off))
		h.Write(hdr[:])
		h.Write(blk)
	}
	binary.BigEndian.PutUint64(hdr[:], uint64(len(b)))
	h.Write(hdr[:])
	return h.Sum(nil)
}

// entryOf walks dir for one file and returns its entry.
func entryOf(t *testing.T, dir, name string) Entry {
	t.Helper()
	var got []Entry
	if err := Walk(t.Context(), dir, []string{name}, nil, func(e Entry) error { got = append(got, e); return nil }); err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].Missing {
		t.Fatalf("walk %s: %+v", name, got)
	}
	return got[0]
}

// Files made with holes in random places, some written, some left as
// holes, some written as zeros: the digest is the definition's, equal
// for equal contents however the zeros are held, and different after any
// one byte changes.
func TestDigestMatchesDefinition(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 40 {
		size := rng.IntN(6 * digestBlock)
		if i < 4 {
			size = []int{0, 1, digestBlock, digestBlock + 1}[i]
		}
		want := make([]byte, size)
		sparse, dense := filepath.Join(dir, "s"+strconv.Itoa(i)), filepath.Join(dir, "d"+strconv.Itoa(i))
		f, err := os.Create(sparse)
		must(t, err)
		must(t, f.Truncate(int64(size)))
		for range rng.IntN(6) {
			if size == 0 {
				break
			}
			off := rng.IntN(size)
			n := min(rng.IntN(3*4096)+1, size-off)
			chunk := make([]byte, n)
			if rng.IntN(3) > 0 { // else zeros, written
				for j := range chunk {
					chunk[j] = byte(rng.IntN(256))
				}
			}
			copy(want[off:], chunk)
			_, err := f.WriteAt(chunk, int64(off))
			must(t, err)
		}
		must(t, f.Close())
		must(t, os.WriteFile(dense, want, 0o644))
		es, ed := entryOf(t, dir, filepath.Base(sparse)), entryOf(t, dir, filepath.Base(dense))
		if !bytes.Equal(es.Digest, refDigest(want)) || es.Size != int64(size) {
			t.Fatalf("file %d (%d bytes): digest %x size %d, want %x", i, size, es.Digest, es.Size, refDigest(want))
		}
		if Diff(es, ed) != "" {
			t.Fatalf("file %d: holes and written zeros differ: %s", i, Diff(es, ed))
		}
		if size == 0 {
			continue
		}
		off := rng.IntN(size)
		want[off] ^= 1 << rng.IntN(8)
		must(t, os.WriteFile(dense, want, 0o644))
		if d := Diff(es, entryOf(t, dir, filepath.Base(dense))); d != "contents differ" {
			t.Fatalf("file %d: byte %d of %d changed: diff %q", i, off, size, d)
		}
	}
}

// A trailing run of zeros is part of the contents: the size is.
func TestDigestTrailingZeros(t *testing.T) {
	a := refDigest([]byte("abc"))
	b := refDigest([]byte("abc\x00"))
	if bytes.Equal(a, b) {
		t.Fatal("a trailing zero does not change the digest")
	}
}

// A 1 TiB file with a few written blocks is digested without reading its
// holes: the bytes this process reads stay near what was written.
func TestDigestSkipsHoles(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "big")
	f, err := os.Create(p)
	must(t, err)
	must(t, f.Truncate(1<<40))
	for _, off := range []int64{0, 1 << 30, 1<<40 - 5} {
		_, err := f.WriteAt([]byte("data!"), off)
		must(t, err)
	}
	must(t, f.Close())
	before := readBytes(t)
	e := entryOf(t, dir, "big")
	read := readBytes(t) - before
	if e.Size != 1<<40 || len(e.Digest) != sha256.Size {
		t.Fatalf("entry %+v", e)
	}
	if read > 16<<20 {
		t.Fatalf("digest of a sparse file read %d bytes", read)
	}
	t.Logf("1 TiB sparse file digested reading %d bytes", read)
}

// readBytes is the bytes this process has read so far (rchar).
func readBytes(t *testing.T) int64 {
	b, err := os.ReadFile("/proc/self/io")
	must(t, err)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "rchar: "); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			must(t, err)
			return n
		}
	}
	t.Fatal("no rchar in /proc/self/io")
	return 0
}

// A side that hashed every byte (a pbfs from before digests) is not
// compared with one that sent digests: neither equal nor differing.
func TestDigestAgainstLegacy(t *testing.T) {
	a := Entry{Path: "f", Mode: 0o100644, Size: 3, Digest: refDigest([]byte("abc"))}
	b := Entry{Path: "f", Mode: 0o100644, Size: 3, SHA256: []byte("old")}
	if !Incomparable(a, b) || !Incomparable(b, a) || Diff(a, b) == "" {
		t.Fatalf("legacy entry compared: incomparable %v, diff %q", Incomparable(a, b), Diff(a, b))
	}
	if c := (Entry{Path: "f", Mode: 0o100644, Size: 3, SHA256: []byte("old")}); Incomparable(b, c) || Diff(b, c) != "" {
		t.Fatalf("two legacy entries: %q", Diff(b, c))
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// A walk whose caller went away stops, also inside a file: `pbfs verify`
// interrupted must not leave the mount hashing a large file to the end.
func TestDigestStopsWithContext(t *testing.T) {
	dir := t.TempDir()
	must(t, os.WriteFile(filepath.Join(dir, "f"), bytes.Repeat([]byte("x"), 8<<20), 0o644))
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	before := readBytes(t)
	err := Walk(ctx, dir, []string{"f"}, nil, func(Entry) error { return nil })
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("walk after its context ended: %v", err)
	}
	if read := readBytes(t) - before; read > 1<<20 {
		t.Fatalf("walk after its context ended read %d bytes", read)
	}
}

// A path or target that is not UTF-8 comes back from JSON as it went.
func TestEntryJSONNotUTF8(t *testing.T) {
	for _, e := range []Entry{
		{Path: "d\xe9j\xe0/f", Mode: 0o100644, Size: 3, Digest: []byte{1, 2}},
		{Path: "plain", Target: "\xff\xfe", Mode: 0o120777},
		{Path: "ok", Mode: 0o40755},
	} {
		b, err := json.Marshal(map[string]Entry{e.Path: e})
		must(t, err)
		var m map[string]Entry
		must(t, json.Unmarshal(b, &m))
		got, ok := Rekey(m)[e.Path]
		if !ok || got.Path != e.Path || got.Target != e.Target || Diff(e, got) != "" {
			t.Errorf("%q: came back %+v from %s", e.Path, got, b)
		}
	}
}
