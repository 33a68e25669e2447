package node

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"
)

// kernelSysctls are the global settings the kubelet writes when protectKernelDefaults is off
// (it refuses to start when they differ and it is on), and the conntrack hash size, which
// `nftproxy init` raises in the host's network namespace only (the node's is another, but the
// tier checks rather than trusts). None is per network namespace: the tier records them
// before the kubelet starts and writes them back after.
var kernelSysctls = []string{
	"/proc/sys/vm/overcommit_memory",
	"/proc/sys/vm/panic_on_oom",
	"/proc/sys/kernel/panic",
	"/proc/sys/kernel/panic_on_oops",
	"/proc/sys/kernel/keys/root_maxkeys",
	"/proc/sys/kernel/keys/root_maxbytes",
	"/proc/sys/net/netfilter/nf_conntrack_max",
	"/sys/module/nf_conntrack/parameters/hashsize",
}

// hostPaths are written by the kubelet, containerd or the CNI library whatever their
// configured root folders say (device-plugin socket, container log links, plugin folders,
// CNI result cache, shim sockets).
var hostPaths = []string{
	"/var/lib/kubelet",
	"/var/log/containers",
	"/var/log/pods",
	"/usr/libexec/kubernetes",
	"/var/lib/cni",
	"/opt/containerd",
	"/run/containerd",
}

// hostState is what a node changes outside its own folder, recorded before it starts.
type hostState struct {
	sysctls map[string]string   // path -> value
	paths   map[string][]string // existing path -> its entries; absent paths are not keys
	cgroups []string            // cgroup hierarchy mount points
	top     string              // the node's cgroup folder in each of them (its cgroupRoot)
}

// recordHost records the host's state and creates the node's cgroup folder top in every
// hierarchy. It refuses a host where top exists already: clean-up could not tell another
// run's cgroups from its own.
func recordHost(top string) (*hostState, error) {
	h := &hostState{sysctls: map[string]string{}, paths: map[string][]string{}, top: top}
	for _, k := range kernelSysctls {
		b, err := os.ReadFile(k)
		if err != nil {
			return nil, fmt.Errorf("record sysctl %s: %w", k, err)
		}
		h.sysctls[k] = strings.TrimSpace(string(b))
	}
	for _, p := range hostPaths {
		ents, err := os.ReadDir(p)
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("record %s: %w", p, err)
		}
		names := []string{}
		for _, e := range ents {
			names = append(names, e.Name())
		}
		h.paths[p] = names
	}
	var err error
	if h.cgroups, err = cgroupMounts(); err != nil {
		return nil, err
	}
	for _, m := range h.cgroups {
		if _, err := os.Stat(filepath.Join(m, top)); err == nil {
			return nil, fmt.Errorf("%s/%s exists: another node tier runs (or a killed one ran) on this machine; stop it and remove its cgroups (rmdir, deepest first) before running the node tier", m, top)
		}
	}
	for _, m := range h.cgroups {
		if err := makeCgroup(m, top); err != nil {
			h.removeCgroups(0)
			return nil, err
		}
	}
	return h, nil
}

// makeCgroup creates dir under the hierarchy mounted at m. A new cgroup v1 cpuset has no CPUs
// and no memory nodes, and no task can join it: it gets its parent's.
func makeCgroup(m, dir string) error {
	p := filepath.Join(m, dir)
	if err := os.Mkdir(p, 0o755); err != nil {
		return fmt.Errorf("create cgroup %s: %w", p, err)
	}
	for _, f := range []string{"cpuset.cpus", "cpuset.mems"} {
		b, err := os.ReadFile(filepath.Join(m, f))
		if errors.Is(err, fs.ErrNotExist) {
			continue // not the cpuset hierarchy
		}
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(p, f), b, 0o644); err != nil {
			return fmt.Errorf("cgroup %s: %s: %w", p, f, err)
		}
	}
	return nil
}

// cgroupMounts lists the mount points of every cgroup (v1) and cgroup2 hierarchy.
func cgroupMounts() ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
		fields := strings.Fields(sc.Text())
		for i, fl := range fields {
			if fl == "-" && i+1 < len(fields) && (fields[i+1] == "cgroup" || fields[i+1] == "cgroup2") {
				out = append(out, fields[4])
			}
		}
	}
	return out, sc.Err()
}

// mountsUnder lists mount points at or below dir in this mount namespace, deepest first.
func mountsUnder(dir string) ([]string, error) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) > 4 && (fields[4] == dir || strings.HasPrefix(fields[4], dir+"/")) {
			out = append(out, fields[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(out)))
	return out, sc.Err()
}

// killCgroupProcs sends SIGKILL to every process in the node's cgroups: containers that
// outlived their runtime. It returns how many it signalled.
func (h *hostState) killCgroupProcs() int {
	n := 0
	for _, m := range h.cgroups {
		_ = filepath.WalkDir(filepath.Join(m, h.top), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			b, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(b)) {
				var pid int
				if _, err := fmt.Sscan(f, &pid); err == nil && pid > 1 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
					n++
				}
			}
			return nil
		})
	}
	return n
}

// removeCgroups removes the node's cgroups from every hierarchy, deepest first, retrying
// while their last processes exit. It returns those that stayed.
func (h *hostState) removeCgroups(wait time.Duration) []string {
	deadline := time.Now().Add(wait)
	for {
		var left []string
		for _, m := range h.cgroups {
			root := filepath.Join(m, h.top)
			var dirs []string
			_ = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
				if err == nil && d.IsDir() {
					dirs = append(dirs, p)
				}
				return nil
			})
			sort.Sort(sort.Reverse(sort.StringSlice(dirs)))
			for _, d := range dirs {
				if err := syscall.Rmdir(d); err != nil && !errors.Is(err, syscall.ENOENT) {
					left = append(left, d)
				}
			}
		}
		if len(left) == 0 || time.Now().After(deadline) {
			return left
		}
		h.killCgroupProcs()
		time.Sleep(200 * time.Millisecond)
	}
}

// restore writes the recorded sysctls back and removes what the node added under hostPaths:
// a path that did not exist goes entirely, a folder that did keeps only its former entries.
// It returns what it changed back, for the log, and what it could not.
func (h *hostState) restore() (changed []string, errs []error) {
	for _, k := range kernelSysctls {
		want := h.sysctls[k]
		b, err := os.ReadFile(k)
		if err == nil && strings.TrimSpace(string(b)) == want {
			continue
		}
		if err := os.WriteFile(k, []byte(want), 0o644); err != nil {
			errs = append(errs, fmt.Errorf("restore sysctl %s=%s: %w", k, want, err))
			continue
		}
		changed = append(changed, fmt.Sprintf("sysctl %s %s -> %s", k, strings.TrimSpace(string(b)), want))
	}
	for _, p := range hostPaths {
		before, existed := h.paths[p]
		if !existed {
			if _, err := os.Lstat(p); err == nil {
				if err := removeTree(p); err != nil {
					errs = append(errs, err)
				}
				changed = append(changed, "removed "+p)
			}
			continue
		}
		keep := map[string]bool{}
		for _, n := range before {
			keep[n] = true
		}
		ents, _ := os.ReadDir(p)
		for _, e := range ents {
			if !keep[e.Name()] {
				if err := removeTree(filepath.Join(p, e.Name())); err != nil {
					errs = append(errs, err)
				}
				changed = append(changed, "removed "+filepath.Join(p, e.Name()))
			}
		}
	}
	return changed, errs
}

// removeTree unmounts whatever is mounted below p (a mount there outlived its namespace's
// owner only if something leaked into this namespace), then removes p.
func removeTree(p string) error {
	mounts, err := mountsUnder(p)
	if err != nil {
		return err
	}
	for _, m := range mounts {
		if err := syscall.Unmount(m, syscall.MNT_DETACH); err != nil {
			return fmt.Errorf("unmount %s: %w", m, err)
		}
	}
	if err := os.RemoveAll(p); err != nil {
		return fmt.Errorf("remove %s: %w", p, err)
	}
	return nil
}
