// Package human writes quantities for people to read, in status output
// and log lines.
package human

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
)

// Bytes writes a byte count in binary units: 1.5 MiB.
func Bytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}

// ParseBytes reads a byte count as Bytes writes it and as people type it:
// 67108864, 64M, 64MiB, 64 MB, 1.5G, 512k. K, M, G, T and P count in
// powers of 1024 whether written K, KB or KiB, as pbfs prints them.
func ParseBytes(s string) (int64, error) {
	t := strings.TrimSpace(s)
	num := strings.TrimRightFunc(t, unicode.IsLetter)
	unit := strings.ToUpper(strings.TrimSpace(t[len(num):]))
	num = strings.TrimSpace(num)
	unit = strings.TrimSuffix(strings.TrimSuffix(unit, "B"), "I")
	shift := strings.Index("KMGTP", unit) + 1
	if len(unit) > 1 || (unit != "" && shift == 0) || num == "" {
		return 0, fmt.Errorf("%q is not a size: write bytes, or a number with K, M, G or T (KiB, MiB, ...): 65536, 64M, 8MiB", s)
	}
	if unit == "" {
		n, err := strconv.ParseInt(num, 10, 64)
		if err != nil || n < 0 {
			return 0, fmt.Errorf("%q is not a size: write bytes, or a number with K, M, G or T (KiB, MiB, ...): 65536, 64M, 8MiB", s)
		}
		return n, nil
	}
	f, err := strconv.ParseFloat(num, 64)
	v := f * float64(int64(1)<<(10*shift))
	if err != nil || f < 0 || v >= 1<<63 {
		return 0, fmt.Errorf("%q is not a size: write bytes, or a number with K, M, G or T (KiB, MiB, ...): 65536, 64M, 8MiB", s)
	}
	return int64(v), nil
}
