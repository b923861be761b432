package procs

import (
	"errors"
	"os"
	"runtime"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestParseCPUs(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want []int
	}{{"1", []int{1}}, {"0,2", []int{0, 2}}, {"2-4", []int{2, 3, 4}}, {" 0, 3-4 ", []int{0, 3, 4}}} {
		set, err := ParseCPUs(tc.in)
		if err != nil {
			t.Fatalf("%q: %v", tc.in, err)
		}
		if set.Count() != len(tc.want) {
			t.Errorf("%q: %d CPUs, want %v", tc.in, set.Count(), tc.want)
		}
		for _, c := range tc.want {
			if !set.IsSet(c) {
				t.Errorf("%q: CPU %d not in the set", tc.in, c)
			}
		}
	}
	for _, bad := range []string{"", ",", "x", "-1", "+1", "3-1", "1-", "1-+2", "99999"} {
		if _, err := ParseCPUs(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
	if _, err := ParseCPUs(" "); !errors.Is(err, ErrNoCPUs) {
		t.Errorf("an empty list: %v, want ErrNoCPUs", err)
	}
}

// TestUsable: a CPU the process may run on passes, one it may not is
// refused with ErrCPUsNotAllowed.
func TestUsable(t *testing.T) {
	var cur unix.CPUSet
	if err := unix.SchedGetaffinity(0, &cur); err != nil {
		t.Fatal(err)
	}
	last := len(cur)*64 - 1
	for c := range len(cur) * 64 {
		if cur.IsSet(c) {
			var one unix.CPUSet
			one.Set(c)
			if err := Usable(one); err != nil {
				t.Errorf("CPU %d, which this process may use: %v", c, err)
			}
		}
	}
	if cur.IsSet(last) {
		t.Skipf("this process may run on CPU %d: no CPU is out of its reach", last)
	}
	var out unix.CPUSet
	out.Set(last)
	if err := Usable(out); !errors.Is(err, ErrCPUsNotAllowed) || !strings.Contains(err.Error(), "CPU "+strconv.Itoa(last)+":") {
		t.Errorf("CPU %d: %v, want ErrCPUsNotAllowed", last, err)
	}
}

// allowed returns each thread's Cpus_allowed_list.
func allowed(t *testing.T) map[string]string {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/task")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, e := range ents {
		data, err := os.ReadFile("/proc/self/task/" + e.Name() + "/status")
		if err != nil {
			continue // exited
		}
		for _, l := range strings.Split(string(data), "\n") {
			if v, ok := strings.CutPrefix(l, "Cpus_allowed_list:"); ok {
				out[e.Name()] = strings.TrimSpace(v)
			}
		}
	}
	return out
}

// TestPin: every thread runs on the pinned CPU, a thread started after
// Pin too, and Unpin gives every thread the affinity from before.
func TestPin(t *testing.T) {
	var before unix.CPUSet
	if err := unix.SchedGetaffinity(0, &before); err != nil {
		t.Fatal(err)
	}
	if before.Count() < 2 {
		t.Skip("this test runs on one CPU: a pinned thread would look like any other")
	}
	first := -1
	for c := 0; first < 0 && c < len(before)*64; c++ {
		if before.IsSet(c) {
			first = c
		}
	}
	was := allowed(t)
	want := was[strconv.Itoa(unix.Gettid())]
	t.Cleanup(func() { Unpin() })
	var one unix.CPUSet
	one.Set(first)
	if err := Pin(one); err != nil {
		t.Fatal(err)
	}
	// Lock goroutines to threads until one of them is a thread the
	// process did not have before Pin.
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	fresh := ""
	for i := 0; fresh == "" && i < 64; i++ {
		locked := make(chan struct{})
		go func() {
			runtime.LockOSThread()
			close(locked)
			<-stop
		}()
		<-locked
		for tid := range allowed(t) {
			if _, old := was[tid]; !old {
				fresh = tid
			}
		}
	}
	if fresh == "" {
		t.Fatal("no new thread started")
	}
	for tid, list := range allowed(t) {
		if list != strconv.Itoa(first) {
			t.Errorf("after Pin, thread %s (new: %v) runs on %s, want %d", tid, tid == fresh, list, first)
		}
	}
	if err := Unpin(); err != nil {
		t.Fatal(err)
	}
	for tid, list := range allowed(t) {
		if list != want {
			t.Errorf("after Unpin, thread %s runs on %s, want %s", tid, list, want)
		}
	}
}

// FuzzParseCPUs: any --cpus value parses or is refused, never panics; a
// set it returns is not empty, and the same text gives the same set.
func FuzzParseCPUs(f *testing.F) {
	for _, s := range []string{"1", "0,2", "2-3", " 0 , 1-1 ", "3-2", "-1", "1023", "1024", "0-1023", ",", "a"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		set, err := ParseCPUs(s)
		if err != nil {
			return
		}
		if set.Count() == 0 {
			t.Fatalf("%q: an empty set without an error", s)
		}
		again, err := ParseCPUs(s)
		if err != nil || again != set {
			t.Fatalf("%q parsed twice differently: %v %v", s, set, err)
		}
	})
}
