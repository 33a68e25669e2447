package sysctl

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/go-logr/logr"
)

func TestMax(t *testing.T) {
	for _, tc := range []struct {
		name       string
		c          Conntrack
		cpus, want int
	}{
		{"defaults on 2 CPUs: the floor", Defaults(), 2, 131072},
		{"defaults on 8 CPUs: per core", Defaults(), 8, 262144},
		{"scaled equal to the floor", Conntrack{MaxPerCore: 100, Min: 400}, 4, 400},
		{"per core 0 leaves it, min ignored", Conntrack{MaxPerCore: 0, Min: 400}, 4, 0},
		{"negative per core leaves it", Conntrack{MaxPerCore: -1, Min: 400}, 4, 0},
		{"no floor", Conntrack{MaxPerCore: 10}, 3, 30},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.c.Max(tc.cpus); got != tc.want {
				t.Errorf("Max(%d) = %d, want %d", tc.cpus, got, tc.want)
			}
		})
	}
}

func TestSettings(t *testing.T) {
	got := Defaults().Settings(2)
	want := []Setting{{"nf_conntrack_max", 131072}, {"nf_conntrack_tcp_timeout_established", 86400}, {"nf_conntrack_tcp_timeout_close_wait", 3600}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("defaults: got %v, want %v", got, want)
	}
	all := Conntrack{TCPBeLiberal: true, UDPTimeout: 30 * time.Second, UDPStreamTimeout: 2*time.Minute + 900*time.Millisecond}
	got = all.Settings(2)
	want = []Setting{{"nf_conntrack_tcp_be_liberal", 1}, {"nf_conntrack_udp_timeout", 30}, {"nf_conntrack_udp_timeout_stream", 120}}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("be-liberal and UDP: got %v, want %v", got, want)
	}
	if got := (Conntrack{}).Settings(2); len(got) != 0 {
		t.Errorf("zero values set %v, want nothing", got)
	}
}

func TestCountCPUList(t *testing.T) {
	for in, want := range map[string]int{"0": 1, "0-1": 2, "0-3,8,10-11": 7, "": 0, "x": 0, "3-1": 0} {
		if got := countCPUList(in); got != want {
			t.Errorf("countCPUList(%q) = %d, want %d", in, got, want)
		}
	}
}

// fakeSystem lays out /proc/sys/net/netfilter and /sys under a temporary directory.
func fakeSystem(t *testing.T, values map[string]string, maxMode os.FileMode, hashsize, online string) System {
	t.Helper()
	root := t.TempDir()
	s := System{Proc: filepath.Join(root, "proc"), Sys: filepath.Join(root, "sys")}
	write := func(p, v string, mode os.FileMode) {
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(v+"\n"), mode); err != nil {
			t.Fatal(err)
		}
	}
	for name, v := range values {
		mode := os.FileMode(0o644)
		if name == MaxName {
			mode = maxMode
		}
		write(s.sysctlPath(name), v, mode)
	}
	write(s.hashsizePath(), hashsize, 0o600)
	write(filepath.Join(s.Sys, "devices", "system", "cpu", "online"), online, 0o444)
	return s
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}

func TestApplyWritesWhatDiffers(t *testing.T) {
	s := fakeSystem(t, map[string]string{
		"nf_conntrack_max":                     "262144", // higher than asked: lowered, as kube-proxy does
		"nf_conntrack_tcp_timeout_established": "86400",  // already right
		"nf_conntrack_tcp_timeout_close_wait":  "60",
	}, 0o644, "1024", "0-1")
	res, err := Apply(logr.Discard(), s, Defaults())
	if err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]Outcome{}
	for _, r := range res {
		outcomes[r.Name] = r.Outcome
	}
	want := map[string]Outcome{"nf_conntrack_max": Written, "nf_conntrack_tcp_timeout_established": Unchanged, "nf_conntrack_tcp_timeout_close_wait": Written}
	if !reflect.DeepEqual(outcomes, want) {
		t.Errorf("outcomes %v, want %v", outcomes, want)
	}
	for name, v := range map[string]string{"nf_conntrack_max": "131072", "nf_conntrack_tcp_timeout_established": "86400", "nf_conntrack_tcp_timeout_close_wait": "3600"} {
		if got := read(t, s.sysctlPath(name)); got != v {
			t.Errorf("%s = %s, want %s", name, got, v)
		}
	}
	if got := read(t, s.hashsizePath()); got != "32768" {
		t.Errorf("hashsize = %s, want 32768 (max/4)", got)
	}
}

// A read-only nf_conntrack_max (any namespace but the host's) is skipped with a reason; the
// timeouts after it are still written.
func TestApplySkipsReadOnlyMax(t *testing.T) {
	s := fakeSystem(t, map[string]string{
		"nf_conntrack_max":                     "1000",
		"nf_conntrack_tcp_timeout_established": "5",
		"nf_conntrack_tcp_timeout_close_wait":  "5",
	}, 0o444, "100", "0-3")
	res, err := Apply(logr.Discard(), s, Defaults())
	if err != nil {
		t.Fatal(err)
	}
	if res[0].Name != MaxName || res[0].Outcome != Skipped || !strings.Contains(res[0].Reason, "initial") {
		t.Errorf("max: %+v, want skipped with a reason naming the initial namespace", res[0])
	}
	if got := read(t, s.sysctlPath(MaxName)); got != "1000" {
		t.Errorf("max = %s, want 1000 untouched", got)
	}
	if got := read(t, s.hashsizePath()); got != "100" {
		t.Errorf("hashsize = %s, want 100 untouched (max was not set)", got)
	}
	if got := read(t, s.sysctlPath("nf_conntrack_tcp_timeout_established")); got != "86400" {
		t.Errorf("established = %s, want 86400", got)
	}
}

func TestApplyMissingSysctlFails(t *testing.T) {
	s := fakeSystem(t, map[string]string{"nf_conntrack_tcp_timeout_established": "5"}, 0o644, "100", "0")
	_, err := Apply(logr.Discard(), s, Conntrack{TCPEstablishedTimeout: time.Hour, UDPTimeout: time.Minute})
	if err == nil || !strings.Contains(err.Error(), "nf_conntrack_udp_timeout") || !strings.Contains(err.Error(), "modprobe") {
		t.Fatalf("err = %v, want one naming nf_conntrack_udp_timeout and what to do", err)
	}
	if got := read(t, s.sysctlPath("nf_conntrack_tcp_timeout_established")); got != "3600" {
		t.Errorf("established = %s, want 3600: what can be written is written", got)
	}
}
