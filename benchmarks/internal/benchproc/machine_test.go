package benchproc

import (
	"fmt"
	"net"
	"net/http"
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
