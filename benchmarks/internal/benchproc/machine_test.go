package benchproc

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"testing"
)

func TestScrape(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "# HELP x y\nplain 3\nsent{backup=\"a\"} 10\nsent{backup=\"b\"} 5\nbad line\n")
	}))
	m := Scrape(ln.Addr().String())
	if m["plain"] != 3 || m[`sent{backup="a"}`] != 10 || m["sent"] != 15 {
		t.Fatalf("scraped %v", m)
	}
	if len(Scrape("")) != 0 {
		t.Fatal("an empty address scraped something")
	}
}

func TestCountTimeWait(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 0100007F:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1 0000000000000000 100 0 0 10 0
   1: 0100007F:9C40 0100007F:1F90 06 00000000:00000000 03:00000F9F 00000000     0        0 0 3 0000000000000000
   2: 0100007F:9C41 0100007F:1F90 06 00000000:00000000 03:00000F9F 00000000     0        0 0 3 0000000000000000
   3: 0100007F:9C42 0100007F:1F90 01 00000000:00000000 00:00000000 00000000     0        0 2 1 0000000000000000 20 4 30 10 -1
`
	if n := countTimeWait(strings.NewReader(table)); n != 2 {
		t.Fatalf("counted %d sockets in TIME_WAIT, want 2", n)
	}
}
