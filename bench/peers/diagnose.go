package peers

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// clockTicks is USER_HZ, the unit of /proc/<pid>/stat times (100 on every Linux architecture Go
// supports).
const clockTicks = 100

// Child is a process of a peer's process group other than the peer itself: for kube-proxy, the
// iptables-restore, iptables-save or ip6tables it is waiting for.
type Child struct {
	Pid     int
	Command string
	Running time.Duration // since it started
	CPU     time.Duration // user + system
	// Read is how far it got through its input: the offset of its standard input when that is a
	// file (of Input bytes), else the bytes it has read (rchar; kube-proxy feeds
	// iptables-restore through a pipe).
	Read, Input int64
}

func (c Child) String() string {
	read := fmt.Sprintf("read %.1f MB", float64(c.Read)/(1<<20))
	if c.Input > 0 {
		read = fmt.Sprintf("at %.1f MB of its %.1f MB input", float64(c.Read)/(1<<20), float64(c.Input)/(1<<20))
	}
	return fmt.Sprintf("%s (pid %d) running for %s, CPU %s, %s", c.Command, c.Pid,
		c.Running.Round(time.Second), c.CPU.Round(time.Second), read)
}

// Children lists the processes of the peer's process group, except the peer itself.
func (pr *Proc) Children() []Child {
	pgid := pr.cmd.Process.Pid
	up := uptime()
	ents, _ := filepath.Glob("/proc/[0-9]*/stat")
	var out []Child
	for _, e := range ents {
		b, err := os.ReadFile(e)
		if err != nil {
			continue
		}
		// The command name is in parentheses and may hold spaces: the fields follow the last ')'.
		s := string(b)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+1:]) // f[0] is field 3 (state)
		if len(f) < 20 {
			continue
		}
		pid, _ := strconv.Atoi(strings.TrimSpace(s[:strings.IndexByte(s, ' ')]))
		pg, _ := strconv.Atoi(f[2])
		if pg != pgid || pid == pgid {
			continue
		}
		ut, _ := strconv.ParseInt(f[11], 10, 64)
		st, _ := strconv.ParseInt(f[12], 10, 64)
		start, _ := strconv.ParseInt(f[19], 10, 64)
		c := Child{Pid: pid, CPU: ticks(ut + st), Running: up - ticks(start)}
		dir := filepath.Dir(e)
		if cl, err := os.ReadFile(filepath.Join(dir, "cmdline")); err == nil {
			c.Command = strings.TrimSpace(strings.ReplaceAll(string(cl), "\x00", " "))
		}
		if st, err := os.Stat(filepath.Join(dir, "fd", "0")); err == nil && st.Mode().IsRegular() {
			c.Input = st.Size()
			if fi, err := os.ReadFile(filepath.Join(dir, "fdinfo", "0")); err == nil {
				for _, l := range strings.Split(string(fi), "\n") {
					if v, ok := strings.CutPrefix(l, "pos:"); ok {
						c.Read, _ = strconv.ParseInt(strings.TrimSpace(v), 10, 64)
					}
				}
			}
		} else if io, err := os.ReadFile(filepath.Join(dir, "io")); err == nil {
			for _, l := range strings.Split(string(io), "\n") {
				if v, ok := strings.CutPrefix(l, "rchar: "); ok {
					c.Read, _ = strconv.ParseInt(v, 10, 64)
				}
			}
		}
		out = append(out, c)
	}
	return out
}

func ticks(n int64) time.Duration { return time.Duration(n) * time.Second / clockTicks }

func uptime() time.Duration {
	b, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return time.Duration(v * float64(time.Second))
}

// Diagnose says what the peer was doing when a wait for it gave up: the processes it was
// waiting for, and its last log lines (each cut to 300 bytes). It is appended to the wait's
// error so a report row names the cause (e.g. an iptables-restore still running after 25 min)
// rather than only the missing answer.
func (pr *Proc) Diagnose(lines int) string {
	var b strings.Builder
	if ok, err := pr.Exited(); ok {
		fmt.Fprintf(&b, "%s exited (%v)", pr.Peer.Name(), err)
	} else {
		fmt.Fprintf(&b, "%s running for %s", pr.Peer.Name(), time.Since(pr.Started).Round(time.Second))
	}
	if cs := pr.Children(); len(cs) > 0 {
		b.WriteString("; waiting for: ")
		for i, c := range cs {
			if i > 0 {
				b.WriteString(", ")
			}
			b.WriteString(c.String())
		}
	}
	if ls := lastLines(pr.Tail(16<<10), lines); len(ls) > 0 {
		b.WriteString("; last log lines: ")
		b.WriteString(strings.Join(ls, " ⏎ "))
	}
	return b.String()
}

// klogHeader is the start of a klog line ("I1125 14:34:53.741521    2640 proxier.go:1484] "),
// left out of a failure's reason to leave room for the message.
var klogHeader = regexp.MustCompile(`^[IWEF]\d{4} [\d:.]+\s+\d+ [^ \]]+\] `)

// lastLines are the last n non-empty lines of s without klog's header, each cut to 300 bytes.
func lastLines(s string, n int) []string {
	var out []string
	ls := strings.Split(strings.TrimRight(s, "\n"), "\n")
	for i := len(ls) - 1; i >= 0 && len(out) < n; i-- {
		l := klogHeader.ReplaceAllString(strings.TrimSpace(ls[i]), "")
		if l == "" {
			continue
		}
		if len(l) > 300 {
			l = l[:300] + "…"
		}
		out = append([]string{l}, out...)
	}
	return out
}
