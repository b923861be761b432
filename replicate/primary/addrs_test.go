package primary

import (
	"strings"
	"testing"
)

// Two addresses of one backup are refused; distinct ports, and a name that
// does not resolve now, are not.
func TestSameBackupTwice(t *testing.T) {
	for _, tc := range []struct {
		addrs []string
		says  string
	}{
		{[]string{"localhost:7701", "127.0.0.1:7701"}, "both reach 127.0.0.1:7701"},
		{[]string{"127.0.0.1:7701", ":7701"}, "both reach"},
		{[]string{"127.0.0.1:7701", "127.0.0.1:7702"}, ""},
		{[]string{"127.0.0.1:7701", "no-such-host.invalid:7701"}, ""},
		{[]string{"127.0.0.1:7701"}, ""},
	} {
		err := sameBackupTwice(tc.addrs)
		switch {
		case tc.says == "" && err != nil:
			t.Errorf("%v: %v", tc.addrs, err)
		case tc.says != "" && (err == nil || !strings.Contains(err.Error(), tc.says)):
			t.Errorf("%v: %v, want it to say %q", tc.addrs, err, tc.says)
		}
	}
}
