package app

import (
	"bytes"
	"flag"
	"io"
	"slices"
	"strings"
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
		o.register(fs, runFlags)
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

// TestCleanupFlags: cleanup offers only the flags it reads (--kube-proxy, --table, -v); a flag of run or render
// is a usage error, not silently ignored.
func TestCleanupFlags(t *testing.T) {
	var help bytes.Buffer
	if code := Main([]string{"nftproxy", "cleanup", "-h"}, io.Discard, &help); code != 0 {
		t.Fatalf("cleanup -h exit %d: %s", code, help.String())
	}
	var got []string
	for _, line := range strings.Split(help.String(), "\n") {
		if f, ok := strings.CutPrefix(strings.TrimSpace(line), "-"); ok {
			got = append(got, strings.Fields(f)[0])
		}
	}
	if want := []string{"kube-proxy", "table", "v"}; !slices.Equal(got, want) {
		t.Errorf("cleanup -h lists %q, want %q:\n%s", got, want, help.String())
	}
	var stderr bytes.Buffer
	if code := Main([]string{"nftproxy", "cleanup", "--manifests", "x"}, io.Discard, &stderr); code != 2 {
		t.Errorf("cleanup --manifests x: exit %d, want 2 (a flag cleanup does not read): %s", code, stderr.String())
	}
}
