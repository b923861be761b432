package human

import "testing"

func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{
		"0": 0, "65536": 65536, "64M": 64 << 20, "64MiB": 64 << 20, "64 MB": 64 << 20, "8mib": 8 << 20,
		"512k": 512 << 10, "1.5G": 3 << 29, "2T": 2 << 40, "1KiB": 1024, "7B": 7,
	} {
		if got, err := ParseBytes(in); err != nil || got != want {
			t.Errorf("ParseBytes(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "lots", "M", "-1", "-1M", "64X", "64MM", "1.5", "1e30G", "9223372036854775808"} {
		if got, err := ParseBytes(bad); err == nil {
			t.Errorf("ParseBytes(%q) = %d, want an error", bad, got)
		}
	}
	// What Bytes writes reads back within its rounding.
	if got, err := ParseBytes(Bytes(48 << 20)); err != nil || got != 48<<20 {
		t.Errorf("ParseBytes(Bytes(48 MiB)) = %d, %v", got, err)
	}
}
