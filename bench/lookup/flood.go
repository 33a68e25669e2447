package lookup

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/test/netns"
)

// Rig is a sender and a receiver namespace joined by a veth pair; the receiver's prerouting
// hook holds the table under test.
type Rig struct {
	Sender, Receiver *netns.NS
	Kernel           *nft.Kernel // programs the receiver
	// CPU is the CPU the flood runs on (the receiver's softirq work runs there too).
	CPU int
}

// NewRig creates the namespaces and the link. Close removes them.
func NewRig(prefix string) (*Rig, error) {
	r := &Rig{CPU: runtime.NumCPU() - 1}
	var err error
	if r.Sender, err = netns.Create(prefix + "-tx"); err != nil {
		return nil, err
	}
	if r.Receiver, err = netns.Create(prefix + "-rx"); err != nil {
		r.Close()
		return nil, err
	}
	steps := []struct {
		ns   *netns.NS
		argv []string
	}{
		{r.Sender, []string{"ip", "link", "add", "v0", "type", "veth", "peer", "name", "v1", "netns", r.Receiver.Name}},
		{r.Sender, []string{"ip", "addr", "add", senderAddr.String() + "/30", "dev", "v0"}},
		{r.Receiver, []string{"ip", "addr", "add", receiverAddr.String() + "/30", "dev", "v1"}},
		{r.Sender, []string{"ip", "link", "set", "v0", "up"}},
		{r.Receiver, []string{"ip", "link", "set", "v1", "up"}},
		{r.Sender, []string{"ip", "route", "add", "198.19.0.0/16", "via", receiverAddr.String()}},
	}
	for _, s := range steps {
		if _, err := s.ns.Run(s.argv...); err != nil {
			r.Close()
			return nil, err
		}
	}
	mac, err := r.Receiver.Run("cat", "/sys/class/net/v1/address")
	if err == nil {
		_, err = r.Sender.Run("ip", "neigh", "replace", receiverAddr.String(), "lladdr", strings.TrimSpace(mac), "dev", "v0", "nud", "permanent")
	}
	if err == nil {
		r.Kernel, err = nft.NewKernel(nft.WithNetNS(r.Receiver.Fd()))
	}
	if err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

// Close removes both namespaces.
func (r *Rig) Close() error {
	var first error
	if r.Kernel != nil {
		r.Kernel.Close()
	}
	for _, ns := range []*netns.NS{r.Sender, r.Receiver} {
		if ns != nil {
			if err := ns.Close(); err != nil && first == nil {
				first = err
			}
		}
	}
	return first
}

// Apply commits tx in the receiver.
func (r *Rig) Apply(ctx context.Context, tx *nft.Transaction) error {
	_, err := r.Kernel.Apply(ctx, tx)
	return err
}

// Flood is the result of one flood.
type Flood struct {
	Packets   int
	Delivered int           // packets the receiver's link counted
	Wall      time.Duration // elapsed time of the send loop
	CPU       time.Duration // CPU time of the sending thread, which also runs the receive softirq
}

// NsPerPacket is the thread's CPU time per packet.
func (f Flood) NsPerPacket() float64 { return float64(f.CPU.Nanoseconds()) / float64(f.Packets) }

// WallPerPacket is the elapsed time per packet.
func (f Flood) WallPerPacket() float64 { return float64(f.Wall.Nanoseconds()) / float64(f.Packets) }

// Flood sends packets UDP datagrams (8-byte payload) to dests in turn, from one thread of the
// sender namespace pinned to r.CPU. veth hands each datagram to the receiver's stack in the
// sender's own softirq, so the loop's time covers the receiver's prerouting hook too.
func (r *Rig) Flood(dests []Dest, packets int) (Flood, error) {
	res := Flood{Packets: packets}
	before, err := r.rxPackets()
	if err != nil {
		return res, err
	}
	sas := make([]unix.Sockaddr, len(dests))
	for i, d := range dests {
		sas[i] = &unix.SockaddrInet4{Port: int(d.Port), Addr: d.Addr.As4()}
	}
	err = r.Sender.Do(func() error {
		var set, orig unix.CPUSet
		if err := unix.SchedGetaffinity(0, &orig); err != nil {
			return err
		}
		set.Set(r.CPU)
		if err := unix.SchedSetaffinity(0, &set); err != nil {
			return fmt.Errorf("pin to CPU %d: %w", r.CPU, err)
		}
		defer unix.SchedSetaffinity(0, &orig)
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			return err
		}
		defer unix.Close(fd)
		payload := make([]byte, 8)
		var t0, t1 unix.Timespec
		if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &t0); err != nil {
			return err
		}
		start := time.Now()
		for i := 0; i < packets; i++ {
			if err := unix.Sendto(fd, payload, 0, sas[i%len(sas)]); err != nil {
				return fmt.Errorf("send %d: %w", i, err)
			}
		}
		res.Wall = time.Since(start)
		if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &t1); err != nil {
			return err
		}
		res.CPU = time.Duration(t1.Nano() - t0.Nano())
		return nil
	})
	if err != nil {
		return res, err
	}
	after, err := r.rxPackets()
	res.Delivered = after - before
	return res, err
}

func (r *Rig) rxPackets() (int, error) {
	out, err := r.Receiver.Run("cat", "/sys/class/net/v1/statistics/rx_packets")
	if err != nil {
		return 0, err
	}
	return strconv.Atoi(strings.TrimSpace(out))
}

// Skip returns a reason the rig cannot run here, or "".
func Skip() string {
	if os.Geteuid() != 0 {
		return "needs root: creates network namespaces"
	}
	return ""
}
