package proxy_test

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/pbfs/pbfs/internal/testservice"
)

// TestEphemeralPortsRunOut runs the proxy in a network namespace of its
// own whose ephemeral port range holds 8 ports, with an upstream pool of
// 32: dials past the eighth connection fail with EADDRNOTAVAIL. The proxy
// must count and log those, shrink its pool to the connections it could
// open, and serve every request through them, each exactly once (nothing
// of a request whose dial failed reached the service).
func TestEphemeralPortsRunOut(t *testing.T) {
	if os.Getenv("PBFS_NETNS_CHILD") == "" {
		if os.Geteuid() != 0 {
			t.Skip("needs root for a network namespace")
		}
		cmd := exec.Command(os.Args[0], "-test.run=^TestEphemeralPortsRunOut$", "-test.v")
		cmd.Env = append(os.Environ(), "PBFS_NETNS_CHILD=1")
		cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
		out, err := cmd.CombinedOutput()
		t.Logf("in a fresh network namespace:\n%s", out)
		if err != nil {
			t.Fatal(err)
		}
		return
	}
	loUp(t)
	// A keep-alive upstream: connections stay open and keep their ports.
	svc := &testservice.Service{Dir: t.TempDir(), KeepAlive: true}
	slow := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(100 * time.Millisecond)
		svc.ServeHTTP(w, r)
	})
	r := start(t, "pool=32,queue-timeout=10s", slow)
	// Narrow the range only now: the listeners above took their ports.
	if err := os.WriteFile("/proc/sys/net/ipv4/ip_local_port_range", []byte("40000 40007"), 0o644); err != nil {
		t.Fatal(err)
	}
	var n tally
	var wg sync.WaitGroup
	for i := 0; i < 64; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// The clients need ports too: give each one of its own,
			// outside the starved range, and keep its connection.
			d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 50000 + i}}
			c := &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 1}}
			defer c.CloseIdleConnections()
			for j := 0; j < 3; j++ {
				n.post(c, fmt.Sprintf("http://%s/kv/p%d-%d", r.addr, i, j))
			}
		}()
	}
	wg.Wait()
	ok, shed, other := &n.ok, &n.shed, &n.other
	noPorts := r.metric(t, "pbfs_proxy_upstream_dial_errors_total", `reason="no-ports"`)
	t.Logf("192 requests: %d served, %d shed, %d other; %v dials failed for want of ports; %v upstream connections open",
		ok.Load(), shed.Load(), other.Load(), noPorts, r.metric(t, "pbfs_proxy_upstream_connections", ""))
	if ok.Load() != 192 || noPorts == 0 || svc.Posts.Load() != 192 {
		t.Fatalf("want every request served once over the connections the ports allow; the service saw %d POSTs", svc.Posts.Load())
	}
	if up := r.metric(t, "pbfs_proxy_upstream_connections", ""); up > 8 {
		t.Fatalf("%v upstream connections with 8 ports", up)
	}
}

// loUp brings the namespace's loopback interface up.
func loUp(t *testing.T) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		t.Fatal(err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		t.Fatal(err)
	}
}

// TestAcceptAtEMFILE: the proxy's process runs out of descriptors (a
// hoard of open files takes every one), so accept(2) fails with EMFILE.
// The proxy must back off, turn waiting clients away with 503 (using its
// reserved descriptor), count it, and serve normally once descriptors are
// free again. The proxy runs in a child process; the clients here.
func TestAcceptAtEMFILE(t *testing.T) {
	if os.Getenv("PBFS_EMFILE_CHILD") != "" {
		emfileChild(t)
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestAcceptAtEMFILE$")
	cmd.Env = append(os.Environ(), "PBFS_EMFILE_CHILD=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var addr, metrics string
	if _, err := fmt.Fscan(stdout, &addr, &metrics); err != nil {
		t.Fatalf("child: %v\n%s", err, stderr.String())
	}
	var n tally
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{}}
			defer c.CloseIdleConnections()
			n.post(c, fmt.Sprintf("http://%s/kv/e%d", addr, i))
		}()
	}
	wg.Wait()
	ok, shed, failed := &n.ok, &n.shed, &n.other
	fmt.Fprintln(stdin, "release")
	r := &rig{addr: addr, metrics: metrics}
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Post("http://"+addr+"/kv/after", "text/plain", strings.NewReader("v"))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusCreated {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("no service after the descriptors came back: %v\n%s", err, stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	emfile := r.metric(t, "pbfs_proxy_accept_errors_total", `reason="emfile"`)
	noFds := r.metric(t, "pbfs_proxy_shed_total", `reason="no-fds"`)
	t.Logf("100 clients while out of descriptors: %d served, %d shed (503), %d failed; the proxy counted %v EMFILE accepts and shed %v clients with its reserved descriptor",
		ok.Load(), shed.Load(), failed.Load(), emfile, noFds)
	if emfile == 0 || noFds == 0 || shed.Load() == 0 {
		t.Fatal("the EMFILE path was not taken")
	}
	stdin.Close()
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v\n%s", err, stderr.String())
	}
}

func emfileChild(t *testing.T) {
	r := start(t, "", nil)
	var hoard []*os.File
	for {
		f, err := os.Open(os.DevNull)
		if err != nil {
			break
		}
		hoard = append(hoard, f)
	}
	fmt.Println(r.addr, r.metrics)
	in := bufio.NewReader(os.Stdin)
	if line, _ := in.ReadString('\n'); strings.TrimSpace(line) != "release" {
		t.Fatalf("parent said %q", line)
	}
	for _, f := range hoard {
		f.Close()
	}
	io.Copy(io.Discard, in) // until the parent is done
}

// TestShedSlowClientGets503: past max-conns a client is turned away with a
// 503, also one that sends its request a while after connecting, as a
// client on a busy machine does. The proxy once waited 50 ms for the
// request and then answered and reset the connection: the client got EOF,
// an error it cannot tell from a crash, instead of a 503.
func TestShedSlowClientGets503(t *testing.T) {
	r := start(t, "max-conns=1", nil)
	hold, err := net.Dial("tcp", r.addr) // takes the only slot
	if err != nil {
		t.Fatal(err)
	}
	defer hold.Close()
	if _, err := fmt.Fprintf(hold, "GET /kv/none HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(hold)
	if resp, err := http.ReadResponse(br, nil); err != nil {
		t.Fatal(err)
	} else {
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for _, delay := range []time.Duration{0, 150 * time.Millisecond, 400 * time.Millisecond} {
		c, err := net.Dial("tcp", r.addr)
		if err != nil {
			t.Fatal(err)
		}
		time.Sleep(delay)
		fmt.Fprintf(c, "POST /kv/slow HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nv")
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		c.Close()
		if err != nil {
			t.Fatalf("a client that sent its request %v after connecting got %v, want a 503", delay, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable {
			t.Fatalf("a client past max-conns got %d, want 503", resp.StatusCode)
		}
	}
}
