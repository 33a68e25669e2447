// Package localports checks, on this node, that no node port and no node-port block can be
// picked by the kernel as the source port of the node's own connections.
//
// The kernel picks those ports from net.ipv4.ip_local_port_range, skipping
// net.ipv4.ip_local_reserved_ports. A connection whose source port is inside a node port or
// block gets its replies captured by the Service's rule and sent to a pod. The allocator's
// leader checks its block range once, on its own node; these sysctls are per node and per
// network namespace, and may change while the daemon runs, so each daemon checks its own:
// the node-port range, the block range and every block it programs, at start and then every
// Interval.
//
// Why a poll, and not a check per sync: the sysctl changes without any Service changing (an
// administrator's sysctl -w, a node-tuning agent), and a quiet node may not sync for an hour.
// The check reads two small files of /proc/sys and walks the Services' ports: microseconds
// every 30 seconds. A new block is checked within one interval of its arrival.
package localports

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/go-logr/logr"

	"github.com/nftproxy/nftproxy/allocator"
)

// Where the kernel publishes the ephemeral port range and the ports kept out of it, for the
// network namespace of the thread that opens them.
const (
	RangeFile    = "/proc/sys/net/ipv4/ip_local_port_range"
	ReservedFile = "/proc/sys/net/ipv4/ip_local_reserved_ports"
)

// DefaultInterval is how often Run checks again.
const DefaultInterval = 30 * time.Second

// The range labels a Check reports counts under: which configured range a count is for. They
// are the values of the metrics package's "range" label; this package owns them so that the
// allocator's controller, which reads the sysctls through ReadFiles, does not depend on metrics
// (and through it on the data plane).
const (
	// LabelNodePortRange is --service-node-port-range.
	LabelNodePortRange = "node_port_range"
	// LabelBlockRange is --range-node-port-range, where blocks may lie.
	LabelBlockRange = "block_range"
	// LabelBlocks is the node-port blocks the node programs (their ports summed).
	LabelBlocks = "blocks"
)

// Labels returns every range label; each Check reports a count for each of them.
func Labels() []string { return []string{LabelNodePortRange, LabelBlockRange, LabelBlocks} }

// Block is one node-port block the node programs.
type Block struct {
	// Name says whose block it is ("ns/svc/tcp/rtp").
	Name  string
	Range allocator.Range
}

// Observer receives the number of overlapping ports per range label (Labels; the daemon passes
// metrics.LocalPorts).
type Observer interface {
	Overlap(rangeLabel string, ports int)
}

// Config is what a Checker checks.
type Config struct {
	// NodePortRange is --service-node-port-range; zero: not checked.
	NodePortRange allocator.Range
	// BlockRange is --range-node-port-range; zero: blocks are disabled.
	BlockRange allocator.Range
	// Blocks returns the node-port blocks the node programs now; nil: none.
	Blocks func() []Block
	// Read returns the ephemeral range and the reserved ports; nil: ReadSysctls, which reads the
	// network namespace of the calling thread (the daemon's).
	Read func() (allocator.Range, []allocator.Range, error)
	// Observer may be nil.
	Observer Observer
	Log      logr.Logger
	// Interval between checks in Run; 0: DefaultInterval.
	Interval time.Duration
}

// Finding is one range with ports the kernel may pick as ephemeral source ports.
type Finding struct {
	// Label is the range label (one of Labels).
	Label string
	// What names the range: a flag and its value, or a block and its Service.
	What    string
	Overlap []allocator.Range
}

// Checker checks the node's ranges against its ephemeral ports and reports what changed.
type Checker struct {
	cfg Config
	// last is the warnings logged by the previous check, so a lasting overlap is logged once.
	last    map[string]bool
	lastErr string
}

// New returns a Checker for cfg.
func New(cfg Config) *Checker {
	if cfg.Read == nil {
		cfg.Read = ReadSysctls
	}
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	return &Checker{cfg: cfg, last: map[string]bool{}}
}

// Run checks now and then every Interval until ctx ends.
func (c *Checker) Run(ctx context.Context) {
	t := time.NewTicker(c.cfg.Interval)
	defer t.Stop()
	for {
		_, _ = c.Check()
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Check reads the sysctls once, sets the gauge for every range and logs each overlap that was
// not there at the previous check (and the end of one that was). A failed read is logged once
// and leaves the gauge as it was: the node's values are unknown, not safe.
func (c *Checker) Check() ([]Finding, error) {
	eph, reserved, err := c.cfg.Read()
	if err != nil {
		if msg := err.Error(); msg != c.lastErr {
			c.cfg.Log.Error(err, "cannot check the node's ephemeral ports against node ports and blocks; will retry")
			c.lastErr = msg
		}
		return nil, err
	}
	c.lastErr = ""
	var found []Finding
	counts := map[string]int{}
	for _, l := range Labels() {
		counts[l] = 0
	}
	check := func(label, what string, r allocator.Range) {
		if runs := allocator.EphemeralOverlap(r, eph, reserved); len(runs) > 0 {
			found = append(found, Finding{Label: label, What: what, Overlap: runs})
			counts[label] += allocator.RangesSize(runs)
		}
	}
	check(LabelNodePortRange, "--service-node-port-range "+c.cfg.NodePortRange.String(), c.cfg.NodePortRange)
	if c.cfg.BlockRange != (allocator.Range{}) {
		check(LabelBlockRange, "--range-node-port-range "+c.cfg.BlockRange.String(), c.cfg.BlockRange)
	}
	if c.cfg.Blocks != nil {
		for _, b := range c.cfg.Blocks() {
			check(LabelBlocks, "node-port block "+b.Range.String()+" of "+b.Name, b.Range)
		}
	}
	if c.cfg.Observer != nil {
		for label, n := range counts {
			c.cfg.Observer.Overlap(label, n)
		}
	}
	c.report(found, eph, reserved)
	return found, nil
}

// report logs the overlaps that are new since the last check, and says when all are gone.
func (c *Checker) report(found []Finding, eph allocator.Range, reserved []allocator.Range) {
	now := map[string]bool{}
	for _, f := range found {
		msg := fmt.Sprintf("%s overlaps the node's ephemeral ports at %s", f.What, formatRanges(f.Overlap))
		now[msg] = true
		if c.last[msg] {
			continue
		}
		c.cfg.Log.Info("WARNING: "+msg+": the node's own connections may use these as source ports, and their replies "+
			"would be sent to a pod; move the range, or reserve the ports with net.ipv4.ip_local_reserved_ports, or "+
			"change net.ipv4.ip_local_port_range",
			"range", f.Label, "ephemeral", eph.String(), "reserved", formatRanges(reserved), "overlap", formatRanges(f.Overlap))
	}
	if len(now) == 0 && len(c.last) > 0 {
		c.cfg.Log.Info("node ports and blocks no longer overlap the node's ephemeral ports", "ephemeral", eph.String(), "reserved", formatRanges(reserved))
	}
	c.last = now
}

func formatRanges(rs []allocator.Range) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = r.String()
	}
	return strings.Join(s, ",")
}

// ReadSysctls reads the ephemeral port range and the reserved ports of the calling thread's
// network namespace. A missing reserved-ports file means none are reserved.
func ReadSysctls() (allocator.Range, []allocator.Range, error) {
	return ReadFiles(RangeFile, ReservedFile)
}

// ReadFiles reads the two sysctls from the given files.
func ReadFiles(rangeFile, reservedFile string) (allocator.Range, []allocator.Range, error) {
	b, err := os.ReadFile(rangeFile)
	if err != nil {
		return allocator.Range{}, nil, fmt.Errorf("read the node's ephemeral port range: %w", err)
	}
	eph, err := allocator.ParseLocalPortRange(string(b))
	if err != nil {
		return allocator.Range{}, nil, fmt.Errorf("%s: %w", rangeFile, err)
	}
	b, err = os.ReadFile(reservedFile)
	if os.IsNotExist(err) {
		return eph, nil, nil
	}
	if err != nil {
		return allocator.Range{}, nil, fmt.Errorf("read the node's reserved ports: %w", err)
	}
	res, err := allocator.ParseReservedPorts(string(b))
	if err != nil {
		return allocator.Range{}, nil, fmt.Errorf("%s: %w", reservedFile, err)
	}
	return eph, res, nil
}
