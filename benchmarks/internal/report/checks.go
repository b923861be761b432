package report

import (
	"fmt"
	"io"
	"strconv"
	"strings"
)

// ParseMetrics reads Prometheus text exposition into series (name{labels})
// and their values; comments and lines that do not parse are skipped.
func ParseMetrics(text string) map[string]float64 {
	m := map[string]float64{}
	for _, line := range strings.Split(text, "\n") {
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			continue
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			continue
		}
		m[line[:i]] = v
	}
	return m
}

// WriteChecks writes the checks every cluster benchmark reports after its
// run: the mounts it left behind and the pbfs log lines above INFO (the
// first 30).
func WriteChecks(w io.Writer, leftMounts, complaints []string) {
	if len(leftMounts) == 0 {
		fmt.Fprintf(w, "- mounts left under the run directory: none\n")
	} else {
		fmt.Fprintf(w, "- mounts left under the run directory: %v\n", leftMounts)
	}
	if len(complaints) == 0 {
		fmt.Fprintf(w, "- pbfs log lines above INFO: none\n")
		return
	}
	fmt.Fprintf(w, "- pbfs log lines above INFO (%d):\n\n", len(complaints))
	for i, l := range complaints {
		if i == 30 {
			fmt.Fprintf(w, "      ... %d more\n", len(complaints)-30)
			break
		}
		fmt.Fprintf(w, "      %s\n", l)
	}
}

// SumSeries adds the series of metric name in m (from ParseMetrics) whose
// labels contain label.
func SumSeries(m map[string]float64, name, label string) float64 {
	var s float64
	for k, v := range m {
		if (k == name || strings.HasPrefix(k, name+"{")) && strings.Contains(k, label) {
			s += v
		}
	}
	return s
}

// Bytes shows a byte count in B, KiB or MiB, whichever reads best.
func Bytes(v float64) string {
	switch {
	case v >= 10<<20:
		return fmt.Sprintf("%.1f MiB", v/(1<<20))
	case v >= 10<<10:
		return fmt.Sprintf("%.1f KiB", v/(1<<10))
	}
	return fmt.Sprintf("%.0f B", v)
}
