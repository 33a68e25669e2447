package e2e

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"

	"github.com/nftproxy/nftproxy/test/fixture"
	"github.com/nftproxy/nftproxy/test/lab"
	"github.com/nftproxy/nftproxy/test/netns"
)

// protoSCTP is SCTP's IP protocol number. This kernel has no SCTP sockets, so the tier speaks
// SCTP through raw IP sockets: it sends an INIT chunk and watches where it arrives.
const protoSCTP = 132

// sctpInit is an SCTP packet (common header and one INIT chunk) from srcPort to dstPort whose
// initiate tag identifies it. The checksum is CRC32c over the packet, stored little-endian as
// the kernel computes it; conntrack drops a packet with a wrong one, and NAT would not apply.
func sctpInit(srcPort, dstPort uint16, tag uint32) []byte {
	b := make([]byte, 12+20)
	binary.BigEndian.PutUint16(b[0:], srcPort)
	binary.BigEndian.PutUint16(b[2:], dstPort)
	// verification tag 0 for an INIT; checksum filled below
	c := b[12:]
	c[0] = 1                                 // INIT
	binary.BigEndian.PutUint16(c[2:], 20)    // chunk length
	binary.BigEndian.PutUint32(c[4:], tag)   // initiate tag
	binary.BigEndian.PutUint32(c[8:], 65535) // advertised receiver window
	binary.BigEndian.PutUint16(c[12:], 1)    // outbound streams
	binary.BigEndian.PutUint16(c[14:], 1)    // inbound streams
	binary.BigEndian.PutUint32(c[16:], tag)  // initial TSN
	binary.LittleEndian.PutUint32(b[8:], crc32.Checksum(b, crc32.MakeTable(crc32.Castagnoli)))
	return b
}

// sctpArrival is an INIT a raw socket received: who sent it and to which port.
type sctpArrival struct {
	from    netip.Addr
	srcPort uint16
	dstPort uint16
}

func (a sctpArrival) String() string {
	return fmt.Sprintf("INIT from %s:%d to port %d", a.from, a.srcPort, a.dstPort)
}

// rawSCTP opens a raw SCTP socket bound to addr inside ns: it receives every SCTP packet
// addressed to addr (the kernel matches a bound raw socket on the destination address).
func rawSCTP(ns *netns.NS, addr netip.Addr) (*net.IPConn, error) {
	var c *net.IPConn
	err := ns.Do(func() error {
		pc, err := net.ListenIP(fmt.Sprintf("ip4:%d", protoSCTP), &net.IPAddr{IP: addr.AsSlice()})
		c = pc
		return err
	})
	return c, err
}

// awaitInit reads from c until an INIT with tag arrives or wait passes (ok false).
func awaitInit(c *net.IPConn, tag uint32, wait time.Duration) (sctpArrival, bool, error) {
	if err := c.SetReadDeadline(time.Now().Add(wait)); err != nil {
		return sctpArrival{}, false, err
	}
	buf := make([]byte, 2048)
	for {
		n, from, err := c.ReadFromIP(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return sctpArrival{}, false, nil
		}
		if err != nil {
			return sctpArrival{}, false, err
		}
		p := buf[:n]
		if n < 32 || p[12] != 1 || binary.BigEndian.Uint32(p[16:]) != tag {
			continue // another packet
		}
		a, _ := netip.AddrFromSlice(from.IP)
		return sctpArrival{from: a.Unmap(), srcPort: binary.BigEndian.Uint16(p[0:]), dstPort: binary.BigEndian.Uint16(p[2:])}, true, nil
	}
}

// TestSCTPClusterIP proves an SCTP Service's DNAT without SCTP sockets: a raw INIT from a
// client to ClusterIP:3868 arrives at pod-1 on target port 3869, masqueraded; an INIT to the
// Service's node port arrives the same way; an INIT to an undefined port never reaches the pod.
func TestSCTPClusterIP(t *testing.T) {
	t.Parallel()
	const port, target, nodePort = 3868, 3869, 30868
	svc := fixture.Service{
		Name: "diameter", Type: "NodePort",
		ClusterIPs: []netip.Addr{lab.ClusterIPv4(40)},
		Ports:      []fixture.Port{{Name: "diameter", Protocol: "SCTP", Port: port, Target: target, NodePort: nodePort}},
		Endpoints:  fixture.Pods(1),
	}
	e := newEnv(t, lab.Options{Pods: 1, Ports: []lab.PortSpec{}}, svc)
	e.start(svc)

	pod, err := rawSCTP(e.lab.Pod(1).NS, lab.PodIPv4(1))
	if err != nil {
		t.Fatal(err)
	}
	defer pod.Close()
	client, err := rawSCTP(e.lab.Client(1).NS, lab.ClientIPv4(1))
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()

	masq := netip.MustParseAddr(lab.PodGatewayV4)
	tests := []struct {
		name    string
		to      netip.Addr
		port    uint16
		arrives bool // at pod-1, on target, from masq
	}{
		{"clusterIP", lab.ClusterIPv4(40), port, true},
		{"node port", netip.MustParseAddr(lab.NodeIPv4), nodePort, true},
		{"undefined port", lab.ClusterIPv4(40), port + 10, false},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tag := 0x5c790000 + uint32(i)
			const srcPort = 40000
			dst := &net.IPAddr{IP: tt.to.AsSlice()}
			if _, err := client.WriteToIP(sctpInit(srcPort, tt.port, tag), dst); err != nil {
				t.Fatalf("send INIT to %s:%d: %v", tt.to, tt.port, err)
			}
			wait := 2 * time.Second
			if !tt.arrives {
				wait = time.Second
			}
			got, ok, err := awaitInit(pod, tag, wait)
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case tt.arrives && !ok:
				t.Errorf("INIT to %s:%d: pod-1 got nothing in %v, want an INIT to port %d from %s", tt.to, tt.port, wait, target, masq)
			case tt.arrives && (got.dstPort != target || got.from != masq):
				t.Errorf("INIT to %s:%d: pod-1 got %v, want an INIT to port %d from %s", tt.to, tt.port, got, target, masq)
			case !tt.arrives && ok:
				t.Errorf("INIT to %s:%d: pod-1 got %v, want nothing", tt.to, tt.port, got)
			}
		})
	}
}
