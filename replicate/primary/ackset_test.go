package primary

import "testing"

func TestParseAck(t *testing.T) {
	for _, c := range []struct {
		policy  string
		n, want int
		bad     bool
	}{{"all", 2, 2, false}, {"majority", 2, 1, false}, {"majority", 4, 2, false}, {"none", 3, 0, false}, {"1", 2, 1, false}, {"3", 2, 0, true}, {"x", 2, 0, true}} {
		got, err := ParseAck(c.policy, c.n)
		if (err != nil) != c.bad || (!c.bad && got != c.want) {
			t.Errorf("ParseAck(%q, %d) = %d, %v", c.policy, c.n, got, err)
		}
	}
}
