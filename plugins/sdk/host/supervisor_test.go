package host

import (
	"encoding/json"
	"testing"

	"github.com/pbfs/pbfs/plugins/sdk"
)

// A plugin's status writes its rules as the SDK's Rule is written: the
// two shapes must not drift apart.
func TestPluginStatusRulesAsSDK(t *testing.T) {
	rules := []sdk.Rule{
		{Pattern: "*.pid", Hint: sdk.PathHint{LocalOnly: true, Reason: "pid files"}},
		{Pattern: "ib_logfile*", Hint: sdk.PathHint{Fsync: sdk.FsyncReplicated, Reason: "redo log"}},
	}
	want, err := json.Marshal(rules)
	if err != nil {
		t.Fatal(err)
	}
	got, err := json.Marshal(ruleShapes(rules))
	if err != nil || string(got) != string(want) {
		t.Fatalf("%v\n got %s\nwant %s", err, got, want)
	}
}
