package localports

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"github.com/go-logr/logr/funcr"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/test/netns"
)

// testLog collects log lines.
type testLog struct{ lines []string }

func (l *testLog) logger() logr.Logger {
	return funcr.New(func(prefix, args string) { l.lines = append(l.lines, prefix+" "+args) }, funcr.Options{})
}

func (l *testLog) grep(s string) []string {
	var out []string
	for _, line := range l.lines {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// testGauge records the last count the Checker reported per range label, as the daemon's gauge
// holds it.
type testGauge struct{ last map[string]int }

func newGauge(*testing.T) *testGauge { return &testGauge{last: map[string]int{}} }

func (g *testGauge) Overlap(label string, ports int) { g.last[label] = ports }

// gauge is the last count reported for label; a label never reported fails the test.
func gauge(t *testing.T, g *testGauge, label string) int {
	t.Helper()
	n, ok := g.last[label]
	if !ok {
		t.Fatalf("range %q never reported (reported: %v)", label, g.last)
	}
	return n
}

// TestCheckerReportsChanges: a lasting overlap is logged once, its end is logged, the gauge
// follows every check, and a failed read keeps the last figures.
func TestCheckerReportsChanges(t *testing.T) {
	eph := allocator.MustParseRange("32768-60999")
	var readErr error
	var log testLog
	m := newGauge(t)
	blocks := []Block{{Name: "default/rtp/udp/media", Range: allocator.MustParseRange("20000-20099")}}
	c := New(Config{
		NodePortRange: allocator.MustParseRange("30000-32767"),
		BlockRange:    allocator.MustParseRange("20000-29999"),
		Blocks:        func() []Block { return blocks },
		Read:          func() (allocator.Range, []allocator.Range, error) { return eph, nil, readErr },
		Observer:      m, Log: log.logger(),
	})
	step := func(name string, wantFindings int, want map[string]int) {
		t.Helper()
		f, _ := c.Check()
		if len(f) != wantFindings {
			t.Errorf("%s: %d findings %v, want %d", name, len(f), f, wantFindings)
		}
		for label, n := range want {
			if got := gauge(t, m, label); got != n {
				t.Errorf("%s: gauge %s = %d, want %d", name, label, got, n)
			}
		}
	}
	step("defaults", 0, map[string]int{LabelNodePortRange: 0, LabelBlockRange: 0, LabelBlocks: 0})
	if n := len(log.grep("WARNING")); n != 0 {
		t.Errorf("defaults: %d warnings, want none:\n%s", n, strings.Join(log.lines, "\n"))
	}
	eph = allocator.MustParseRange("20050-40000")
	step("wide ephemeral range", 3, map[string]int{LabelNodePortRange: 2768, LabelBlockRange: 9950, LabelBlocks: 50})
	step("same again", 3, nil)
	for _, want := range []string{
		"--service-node-port-range 30000-32767 overlaps the node's ephemeral ports at 30000-32767",
		"--range-node-port-range 20000-29999 overlaps the node's ephemeral ports at 20050-29999",
		"node-port block 20000-20099 of default/rtp/udp/media overlaps the node's ephemeral ports at 20050-20099",
	} {
		if got := log.grep(want); len(got) != 1 {
			t.Errorf("want one warning %q, got %d:\n%s", want, len(got), strings.Join(log.lines, "\n"))
		}
	}
	readErr = errors.New("boom")
	step("read fails", 0, map[string]int{LabelNodePortRange: 2768})
	c.Check()
	if got := log.grep("boom"); len(got) != 1 {
		t.Errorf("a lasting read error logged %d times, want once", len(got))
	}
	readErr = nil
	eph = allocator.MustParseRange("32768-60999")
	step("fixed", 0, map[string]int{LabelNodePortRange: 0, LabelBlockRange: 0, LabelBlocks: 0})
	if got := log.grep("no longer overlap"); len(got) != 1 {
		t.Errorf("the end of the overlap logged %d times, want once:\n%s", len(got), strings.Join(log.lines, "\n"))
	}
}

// TestCheckInNamespace: the check reads the sysctls of the namespace it runs in. A fresh
// namespace whose ip_local_port_range covers the node-port range, with part of it reserved,
// yields the warning and the gauge, while the caller's own namespace is left as it was.
func TestCheckInNamespace(t *testing.T) {
	ns := netns.New(t, "lports")
	hostRange, err := os.ReadFile(RangeFile)
	if err != nil {
		t.Fatal(err)
	}
	err = ns.Do(func() error {
		if err := os.WriteFile(RangeFile, []byte("30000 40000"), 0o644); err != nil {
			return err
		}
		return os.WriteFile(ReservedFile, []byte("31000-31999"), 0o644)
	})
	if err != nil {
		t.Fatalf("set the namespace's sysctls: %v", err)
	}
	if after, _ := os.ReadFile(RangeFile); string(after) != string(hostRange) {
		t.Fatalf("the test changed its own namespace's ip_local_port_range: %q, was %q", after, hostRange)
	}
	var log testLog
	m := newGauge(t)
	c := New(Config{
		NodePortRange: allocator.MustParseRange("30000-32767"),
		BlockRange:    allocator.MustParseRange("20000-29999"),
		Blocks: func() []Block {
			return []Block{{Name: "default/safe/tcp/a", Range: allocator.MustParseRange("20000-20099")}}
		},
		Read: func() (eph allocator.Range, res []allocator.Range, err error) {
			derr := ns.Do(func() error { eph, res, err = ReadSysctls(); return nil })
			return eph, res, errors.Join(derr, err)
		},
		Observer: m, Log: log.logger(),
	})
	if _, err := c.Check(); err != nil {
		t.Fatalf("Check: %v", err)
	}
	want := "--service-node-port-range 30000-32767 overlaps the node's ephemeral ports at 30000-30999,32000-32767"
	if got := log.grep(want); len(got) != 1 {
		t.Errorf("want the warning %q, got:\n%s", want, strings.Join(log.lines, "\n"))
	}
	for label, n := range map[string]int{LabelNodePortRange: 768 + 1000, LabelBlockRange: 0, LabelBlocks: 0} {
		if got := gauge(t, m, label); got != n {
			t.Errorf("gauge %s{range=%q} = %d, want %d", "range", label, got, n)
		}
	}
}
