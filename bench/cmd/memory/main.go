// Command memory measures the nftproxy binary's peak resident memory and wall time in manifest
// mode: `run --once` of the seeded bench workload from empty (start-up), then again against the
// kernel the first run programmed (a restart: the read-back and a diff that sends nothing), each
// in a fresh network namespace, several times, and prints the medians:
//
//	make build && go run ./bench/cmd/memory -nftproxy bin/nftproxy -services 10000 -runs 5
//
// The peak is the child's ru_maxrss (VmHWM). It needs root (network namespaces).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"syscall"
	"time"

	"github.com/nftproxy/nftproxy/test/netns"
)

func main() {
	bin := flag.String("nftproxy", "bin/nftproxy", "the nftproxy binary")
	services := flag.Int("services", 10000, "number of Services")
	endpoints := flag.Int("endpoints", 10, "endpoints per Service port")
	runs := flag.Int("runs", 5, "runs of each phase (medians are printed)")
	env := flag.String("env", "", "extra environment for the binary, e.g. GOGC=50")
	flag.Parse()
	if err := measure(*bin, *services, *endpoints, *runs, *env); err != nil {
		fmt.Fprintln(os.Stderr, "memory:", err)
		os.Exit(1)
	}
}

type sample struct {
	wall time.Duration
	rss  int64 // bytes
	cpu  time.Duration
	ops  int    // what its "applied" log line says it sent
	log  string // the end of its log
}

func measure(bin string, services, endpoints, runs int, env string) error {
	dir, err := os.MkdirTemp("", "nftproxy-memory-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	manifests := filepath.Join(dir, "manifests")
	gen := exec.Command("go", "run", "./bench/cmd/manifests", "-services", fmt.Sprint(services),
		"-endpoints", fmt.Sprint(endpoints), "-out", manifests)
	gen.Stdout, gen.Stderr = os.Stderr, os.Stderr
	if err := gen.Run(); err != nil {
		return fmt.Errorf("write the workload: %w", err)
	}
	var start, restart []sample
	for i := 0; i < runs; i++ {
		ns, err := netns.Create("nftp-mem")
		if err != nil {
			return err
		}
		state := filepath.Join(dir, fmt.Sprint("state-", i))
		s1, err1 := runOnce(bin, ns.Name, manifests, state, env)
		s2, err2 := runOnce(bin, ns.Name, manifests, state, env)
		ns.Close()
		if err1 != nil {
			return err1
		}
		if err2 != nil {
			return err2
		}
		// The start-up must program the workload, the restart must find it all there.
		if s1.ops < services || s2.ops != 0 {
			return fmt.Errorf("run %d: start-up sent %d ops, restart %d: want at least %d, then 0 (see the log:\n%s)", i+1, s1.ops, s2.ops, services, s1.log)
		}
		start, restart = append(start, s1), append(restart, s2)
		fmt.Fprintf(os.Stderr, "run %d: start-up %v %d MB, restart %v %d MB\n", i+1,
			s1.wall.Round(time.Millisecond), s1.rss>>20, s2.wall.Round(time.Millisecond), s2.rss>>20)
	}
	fmt.Printf("%d Services × %d endpoints, %d runs, medians [min–max]%s\n", services, endpoints, runs, envNote(env))
	fmt.Println("| run --once | wall | CPU (user+sys) | peak RSS |")
	fmt.Println("|---|---:|---:|---:|")
	for _, row := range []struct {
		name string
		s    []sample
	}{{"start-up (empty kernel)", start}, {"restart (programmed kernel)", restart}} {
		w := stat(row.s, func(s sample) int64 { return int64(s.wall) })
		c := stat(row.s, func(s sample) int64 { return int64(s.cpu) })
		r := stat(row.s, func(s sample) int64 { return s.rss })
		fmt.Printf("| %s | %v [%v–%v] | %v [%v–%v] | %.0f MB [%.0f–%.0f] |\n", row.name,
			dur(w[0]), dur(w[1]), dur(w[2]), dur(c[0]), dur(c[1]), dur(c[2]), mb(r[0]), mb(r[1]), mb(r[2]))
	}
	return nil
}

func envNote(env string) string {
	if env == "" {
		return ""
	}
	return ", " + env
}

// runOnce runs `nftproxy run --once` in namespace ns and returns its wall time, CPU and peak RSS.
func runOnce(bin, ns, manifests, state, env string) (sample, error) {
	cmd := exec.Command("ip", "netns", "exec", ns, bin, "run", "--once", "--manifests", manifests,
		"--node-name", "bench-node", "--service-node-port-range", "30000-60000", "--state-dir", state,
		"--manifest-max-file-size", fmt.Sprint(1<<30)) // the workload is one file: 16 MB at 10k
	if env != "" {
		cmd.Env = append(os.Environ(), env)
	}
	out := &tail{}
	cmd.Stdout, cmd.Stderr = out, out
	t0 := time.Now()
	if err := cmd.Run(); err != nil {
		return sample{}, fmt.Errorf("%s: %w: %s", cmd, err, out.b)
	}
	wall := time.Since(t0)
	ru := cmd.ProcessState.SysUsage().(*syscall.Rusage)
	cpu := time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
	ops := -1
	if m := appliedOps.FindAllSubmatch(out.b, -1); len(m) > 0 {
		ops, _ = strconv.Atoi(string(m[len(m)-1][1]))
	}
	return sample{wall: wall, rss: ru.Maxrss << 10, cpu: cpu, ops: ops, log: string(out.b)}, nil
}

// appliedOps finds the operation count in run's `"applied" ops=N` log line.
var appliedOps = regexp.MustCompile(`"applied" ops=(\d+)`)

// stat returns the median, min and max of f over s.
func stat(s []sample, f func(sample) int64) [3]int64 {
	v := make([]int64, len(s))
	for i := range s {
		v[i] = f(s[i])
	}
	slices.Sort(v)
	return [3]int64{v[len(v)/2], v[0], v[len(v)-1]}
}

func dur(n int64) time.Duration { return time.Duration(n).Round(10 * time.Millisecond) }
func mb(n int64) float64        { return float64(n) / 1e6 }

// tail keeps the last 4 KiB written, for an error message.
type tail struct{ b []byte }

func (t *tail) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > 4096 {
		t.b = t.b[len(t.b)-4096:]
	}
	return len(p), nil
}
