// Command crasher is a frontend that takes barriers until PBFS_CRASH_AFTER
// (a duration) has passed, then dies with a panic, as a buggy plugin does.
package main

import (
	"context"
	"os"
	"time"

	"github.com/pbfs/pbfs/plugins/sdk"
)

type crasher struct{}

func (crasher) Start(_ context.Context, env sdk.Env) error {
	d, err := env.Config.Duration("crash-after", time.Hour)
	if err != nil {
		return err
	}
	if f := env.Config.String("touch", ""); f != "" {
		// Proves to the test that this incarnation started.
		os.WriteFile(f+"."+time.Now().Format("150405.000000"), nil, 0o644)
	}
	go func() {
		time.Sleep(d)
		panic("crasher: crashing on purpose")
	}()
	return nil
}

func (crasher) Stop(context.Context) error { return nil }

func main() { sdk.Serve(crasher{}) }
