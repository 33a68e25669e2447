package sysctl

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"

	"github.com/go-logr/logr"
)

// System is where the sysctls live: the /proc and /sys roots (tests point them at a directory)
// and how many CPUs count.
type System struct {
	// Proc is the procfs root ("/proc").
	Proc string
	// Sys is the sysfs root ("/sys"): the conntrack hash size and the online CPUs.
	Sys string
}

// Host is the running kernel's /proc and /sys.
func Host() System { return System{Proc: "/proc", Sys: "/sys"} }

// ConntrackLoaded reports whether the conntrack sysctls exist (nf_conntrack is loaded).
func (s System) ConntrackLoaded() bool {
	_, err := os.Stat(s.sysctlPath(MaxName))
	return err == nil
}

func (s System) sysctlPath(name string) string {
	return filepath.Join(s.Proc, "sys", "net", "netfilter", name)
}

func (s System) hashsizePath() string {
	return filepath.Join(s.Sys, "module", "nf_conntrack", "parameters", "hashsize")
}

// CPUs counts the machine's online CPUs from sysfs, as kube-proxy does (its cadvisor topology):
// the process's own CPU set (what Go's NumCPU sees) can be smaller than the node in a container
// pinned to some CPUs, and conntrack serves the whole node. Go's count is the fallback.
func (s System) CPUs() int {
	b, err := os.ReadFile(filepath.Join(s.Sys, "devices", "system", "cpu", "online"))
	if err != nil {
		return runtime.NumCPU()
	}
	if n := countCPUList(strings.TrimSpace(string(b))); n > 0 {
		return n
	}
	return runtime.NumCPU()
}

// countCPUList counts a kernel CPU list ("0-3,8,10-11"); 0 when it does not parse.
func countCPUList(s string) int {
	n := 0
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := strconv.Atoi(lo)
		if err != nil {
			return 0
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(hi); err != nil || b < a {
				return 0
			}
		}
		n += b - a + 1
	}
	return n
}

// Outcome is what Apply did with one setting.
type Outcome string

// Outcomes.
const (
	Written   Outcome = "written"   // the value differed and was written
	Unchanged Outcome = "unchanged" // the kernel already had the value
	Skipped   Outcome = "skipped"   // not writable here, for a reason that is not a failure (Reason says which)
)

// Result is one setting and what became of it.
type Result struct {
	Setting
	Outcome Outcome
	// Before is the value read before writing (-1 when it could not be read).
	Before int
	// Reason says why a setting was skipped.
	Reason string
}

// Apply writes c's settings with kube-proxy's semantics: a value already in place is not
// written again; nf_conntrack_max is written whenever it differs (lowered too, as kube-proxy
// does), and the conntrack hash size is raised to a quarter of it when smaller.
//
// nf_conntrack_max exists read-only in every network namespace but the initial one, so there it
// is skipped with a logged reason (the per-namespace timeouts are still written). A hash size
// that cannot be raised (sysfs read-only, as some runtimes mount it, or not the initial
// namespace) is logged, as kube-proxy reports it with an Event, and is not a failure: the limit
// still holds, lookups in a smaller hash table are only slower. Any other failure (a missing
// sysctl: nf_conntrack not loaded; /proc/sys read-only: the container is not privileged) is
// returned, after the settings that could be written were.
func Apply(log logr.Logger, s System, c Conntrack) ([]Result, error) {
	var out []Result
	var errs []error
	for _, st := range c.Settings(s.CPUs()) {
		r, err := s.apply(log, st)
		out = append(out, r)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if st.Name == MaxName && r.Outcome != Skipped {
			s.raiseHashsize(log, st.Value)
		}
	}
	return out, errors.Join(errs...)
}

func (s System) apply(log logr.Logger, st Setting) (Result, error) {
	p := s.sysctlPath(st.Name)
	r := Result{Setting: st, Before: -1}
	cur, err := readInt(p)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return r, fmt.Errorf("sysctl net.netfilter.%s does not exist: load the nf_conntrack module first (modprobe nf_conntrack)", st.Name)
		}
		return r, fmt.Errorf("read sysctl net.netfilter.%s: %w", st.Name, err)
	}
	r.Before = cur
	if cur == st.Value {
		r.Outcome = Unchanged
		log.V(2).Info("sysctl already set", "entry", "net/netfilter/"+st.Name, "value", st.Value)
		return r, nil
	}
	if st.Name == MaxName {
		if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o222 == 0 {
			r.Outcome = Skipped
			r.Reason = "read-only in this network namespace: the kernel lets only the host's (initial) namespace set the conntrack table size; run init with hostNetwork to set it"
			log.Info("Not setting sysctl", "entry", "net/netfilter/"+st.Name, "value", st.Value, "current", cur, "reason", r.Reason)
			return r, nil
		}
	}
	log.Info("Set sysctl", "entry", "net/netfilter/"+st.Name, "value", st.Value, "previous", cur)
	if err := os.WriteFile(p, []byte(strconv.Itoa(st.Value)), 0o644); err != nil {
		return r, fmt.Errorf("write sysctl net.netfilter.%s=%d: %w (init needs a writable /proc/sys: run it privileged)", st.Name, st.Value, err)
	}
	r.Outcome = Written
	return r, nil
}

// raiseHashsize raises the conntrack hash table to max/4 buckets when it is smaller, as
// kube-proxy does; failures are logged only (see Apply).
func (s System) raiseHashsize(log logr.Logger, max int) {
	p := s.hashsizePath()
	cur, err := readInt(p)
	if err != nil {
		log.Info("Cannot read the conntrack hash size; not raising it", "path", p, "err", err.Error())
		return
	}
	if cur >= max/4 {
		return
	}
	log.Info("Setting conntrack hashsize", "conntrackHashsize", max/4, "previous", cur)
	if err := os.WriteFile(p, []byte(strconv.Itoa(max/4)), 0o640); err != nil {
		log.Info("Cannot raise the conntrack hash size (sysfs read-only, or not the host's network namespace); the limit holds, lookups are slower",
			"path", p, "want", max/4, "current", cur, "err", err.Error())
	}
}

func readInt(p string) (int, error) {
	b, err := os.ReadFile(p)
	if err != nil {
		return 0, err
	}
	v, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("%s holds %q, not an integer", p, strings.TrimSpace(string(b)))
	}
	return v, nil
}
