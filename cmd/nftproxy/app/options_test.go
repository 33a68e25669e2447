package app

import (
	"flag"
	"io"
	"testing"
	"time"
)

// TestMinSyncPeriodFlag: without the flag the sync loop adapts its wait (1 s ceiling); a
// duration given on the command line keeps kube-proxy's meaning, a fixed least time between
// syncs, 0 included; anything else is an error.
func TestMinSyncPeriodFlag(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		fixed  bool
		period time.Duration
		err    bool
	}{
		{nil, false, 0, false}, // 0: the runner's default ceiling, 1 s
		{[]string{"--min-sync-period", "auto"}, false, 0, false},
		{[]string{"--min-sync-period", "1s"}, true, time.Second, false},
		{[]string{"--min-sync-period=10s"}, true, 10 * time.Second, false},
		{[]string{"--min-sync-period", "0"}, true, 0, false},
		{[]string{"--min-sync-period", "-1s"}, false, 0, true},
		{[]string{"--min-sync-period", "soon"}, false, 0, true},
	} {
		var o Options
		fs := flag.NewFlagSet("run", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		o.register(fs, true)
		err := fs.Parse(tc.args)
		if (err != nil) != tc.err {
			t.Errorf("%v: error %v, want error %v", tc.args, err, tc.err)
			continue
		}
		if tc.err {
			continue
		}
		rc := o.runConfig()
		if rc.FixedSyncPeriod != tc.fixed {
			t.Errorf("%v: fixed %v, want %v", tc.args, rc.FixedSyncPeriod, tc.fixed)
		}
		if got := rc.MinSyncPeriod; got != tc.period {
			t.Errorf("%v: period %v, want %v", tc.args, got, tc.period)
		}
	}
}
