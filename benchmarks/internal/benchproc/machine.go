package benchproc

import (
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
)

// LoadAvg is the machine's 1, 5 and 15 minute load averages, for a
// report's header ("?" when /proc does not say).
func LoadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

// Scrape reads a Prometheus text endpoint at http://addr/metrics into a
// map from each series (name{labels}) to its value; a labelled series
// is also summed into its bare name. An empty addr or a failed request
// gives an empty map.
func Scrape(addr string) map[string]float64 {
	out := map[string]float64{}
	if addr == "" {
		return out
	}
	resp, err := http.Get("http://" + addr + "/metrics")
	if err != nil {
		return out
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	for _, l := range strings.Split(string(data), "\n") {
		i := strings.LastIndexByte(l, ' ')
		if i <= 0 || strings.HasPrefix(l, "#") {
			continue
		}
		v, err := strconv.ParseFloat(l[i+1:], 64)
		if err != nil {
			continue
		}
		out[l[:i]] += v
		if name, _, labeled := strings.Cut(l[:i], "{"); labeled {
			out[name] += v
		}
	}
	return out
}

// Commit is `git describe --always --dirty` of the tree the benchmark
// runs from ("unknown" outside a checkout).
func Commit() string {
	out, err := exec.Command("git", "describe", "--always", "--dirty").Output()
	if err != nil {
		return "unknown"
	}
	return strings.TrimSpace(string(out))
}
