package events

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"
)

func TestBusHistoryAndWatch(t *testing.T) {
	var none *Bus
	none.Emit(KindRole, "role", "primary") // a nil bus drops it
	b := New()
	for i := 0; i < history+10; i++ {
		b.Emit(KindBackupUp, "n", i)
	}
	ch, stop := b.Watch(true)
	defer stop()
	first := <-ch
	if first.Attrs["n"] != 10 {
		t.Fatalf("the oldest event kept: %+v, want n=10 (the last %d)", first, history)
	}
	for i := 1; i < history; i++ {
		<-ch
	}
	b.Emit(KindBackupDown, "backup", "b1:7700")
	if e := <-ch; e.Kind != KindBackupDown || e.Attrs["backup"] != "b1:7700" {
		t.Fatalf("a new event: %+v", e)
	}
}

func TestServeHTTPStreams(t *testing.T) {
	b := New()
	b.Emit(KindRole, "role", "backup")
	srv := httptest.NewServer(b)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var kinds []string
	for sc.Scan() {
		var e Event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			t.Fatal(err)
		}
		kinds = append(kinds, e.Kind)
		if len(kinds) == 1 {
			b.Emit(KindFenced, "epoch", 3)
		}
		if len(kinds) == 2 {
			break
		}
	}
	if len(kinds) != 2 || kinds[0] != KindRole || kinds[1] != KindFenced {
		t.Fatalf("streamed %v", kinds)
	}
}
