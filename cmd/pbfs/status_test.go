package main

import (
	"strings"
	"testing"

	"github.com/pbfs/pbfs/coord"
)

// While no primary serves, the table says which backups' reports count
// in the election: those fenced at the ended epoch.
func TestMemberStateShowsTheFence(t *testing.T) {
	r := &coord.Report{Epoch: 4}
	for _, c := range []struct {
		m    coord.Member
		want string
	}{
		{coord.Member{Role: "backup", Fenced: 4}, "ok, fenced epoch 4"},
		{coord.Member{Role: "backup", Fenced: 3}, "ok, not fenced yet: its report does not count"},
		{coord.Member{Role: "backup", Fenced: 3, Stalled: true}, "stalled: needs a resync, not fenced yet"},
	} {
		if got := memberState(r, c.m); !strings.HasPrefix(got, c.want) {
			t.Errorf("%+v: %q, want %q", c.m, got, c.want)
		}
	}
	r.Leader = &coord.Leader{Name: "a", Epoch: 4}
	if got := memberState(r, coord.Member{Role: "backup", Fenced: 3}); got != "ok" {
		t.Errorf("with a primary serving: %q, want ok", got)
	}
}
