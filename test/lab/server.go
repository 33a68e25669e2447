package lab

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/nftproxy/nftproxy/test/netns"
)

// PortSpec is a port or a contiguous port range a backend listens on.
type PortSpec struct {
	// Proto is "tcp", "udp", or "" for both.
	Proto string
	// First is the (first) port.
	First uint16
	// Last ends a range, inclusive; 0 means just First.
	Last uint16
}

// Port is a PortSpec for one port on TCP and UDP.
func Port(p uint16) PortSpec { return PortSpec{First: p} }

// PortRange is a PortSpec for first..last on TCP and UDP. One socket is opened per port and
// protocol and address, so keep ranges in tests small (tens of ports).
func PortRange(first, last uint16) PortSpec { return PortSpec{First: first, Last: last} }

func (s PortSpec) protos() ([]string, error) {
	switch s.Proto {
	case "":
		return []string{"tcp", "udp"}, nil
	case "tcp", "udp":
		return []string{s.Proto}, nil
	}
	return nil, fmt.Errorf("port spec %d: protocol %q, want tcp, udp or empty", s.First, s.Proto)
}

func (s PortSpec) last() uint16 {
	if s.Last == 0 {
		return s.First
	}
	return s.Last
}

// maxIdle bounds how long a backend keeps an idle TCP connection, so a client that forgets to
// close cannot keep a goroutine alive for the rest of the run.
const maxIdle = 60 * time.Second

// Server is a set of identity backends in one namespace: every TCP connection and UDP datagram
// is answered with a Reply line naming the server, the protocol, the local address and port the
// packet arrived on, and the remote address the server saw.
type Server struct {
	name string

	mu     sync.Mutex
	closed bool
	lns    []net.Listener
	pcs    []net.PacketConn
	conns  map[net.Conn]struct{}
	wg     sync.WaitGroup
	closer sync.Once
}

// Serve opens listeners in ns on every address in addrs, for every port and protocol in specs,
// and answers with name as the identity. Sockets are bound to each address (not the wildcard)
// so a UDP reply leaves from the address the request was sent to. Close stops it.
func Serve(ns *netns.NS, name string, addrs []netip.Addr, specs []PortSpec) (*Server, error) {
	s := &Server{name: name, conns: map[net.Conn]struct{}{}}
	err := ns.Do(func() error {
		var lc net.ListenConfig
		for _, spec := range specs {
			protos, err := spec.protos()
			if err != nil {
				return err
			}
			if spec.First == 0 || spec.last() < spec.First {
				return fmt.Errorf("port spec %d-%d: want 0 < first <= last", spec.First, spec.last())
			}
			for _, a := range addrs {
				for port := int(spec.First); port <= int(spec.last()); port++ {
					ap := netip.AddrPortFrom(a, uint16(port)).String()
					for _, proto := range protos {
						if err := s.listen(&lc, proto, family(proto, a), ap); err != nil {
							return err
						}
					}
				}
			}
		}
		return nil
	})
	if err != nil {
		s.Close()
		return nil, fmt.Errorf("serve %s in %s: %w", name, ns.Name, err)
	}
	return s, nil
}

// family turns "tcp" into "tcp4" or "tcp6" so a socket bound to an IPv4 address never becomes
// dual-stack.
func family(proto string, a netip.Addr) string {
	if a.Is4() {
		return proto + "4"
	}
	return proto + "6"
}

func (s *Server) listen(lc *net.ListenConfig, proto, network, addr string) error {
	ctx := context.Background()
	if proto == "tcp" {
		ln, err := lc.Listen(ctx, network, addr)
		if err != nil {
			return err
		}
		s.lns = append(s.lns, ln)
		s.wg.Add(1)
		go s.acceptLoop(ln)
		return nil
	}
	pc, err := lc.ListenPacket(ctx, network, addr)
	if err != nil {
		return err
	}
	s.pcs = append(s.pcs, pc)
	s.wg.Add(1)
	go s.packetLoop(pc.(*net.UDPConn))
	return nil
}

func (s *Server) acceptLoop(ln net.Listener) {
	defer s.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		if !s.track(c) {
			c.Close()
			return
		}
		s.wg.Add(1)
		go s.serveConn(c)
	}
}

// track records an open connection so Close can end it; false once the server is closed.
func (s *Server) track(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.conns[c] = struct{}{}
	return true
}

// serveConn answers at once, then once more for every line the client sends, so a long-lived
// connection can be probed repeatedly (e.g. to prove it survives an endpoint change).
func (s *Server) serveConn(c net.Conn) {
	defer s.wg.Done()
	defer func() {
		s.mu.Lock()
		delete(s.conns, c)
		s.mu.Unlock()
		c.Close()
	}()
	local := addrPort(c.LocalAddr())
	reply := Reply{Pod: s.name, Proto: "tcp", Port: local.Port(), To: local.Addr(), From: addrPort(c.RemoteAddr())}
	line := []byte(reply.String() + "\n")
	r := bufio.NewReader(c)
	for {
		_ = c.SetDeadline(time.Now().Add(maxIdle))
		if _, err := c.Write(line); err != nil {
			return
		}
		if _, err := r.ReadString('\n'); err != nil {
			return
		}
	}
}

func (s *Server) packetLoop(pc *net.UDPConn) {
	defer s.wg.Done()
	local := addrPort(pc.LocalAddr())
	buf := make([]byte, 2048)
	for {
		_, from, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue // e.g. an ICMP error queued on the socket; keep serving
		}
		reply := Reply{Pod: s.name, Proto: "udp", Port: local.Port(), To: local.Addr(), From: unmap(from)}
		_, _ = pc.WriteToUDPAddrPort([]byte(reply.String()+"\n"), from)
	}
}

// Close stops every listener and open connection and waits for the server's goroutines.
func (s *Server) Close() {
	s.closer.Do(func() {
		s.mu.Lock()
		s.closed = true
		for _, ln := range s.lns {
			ln.Close()
		}
		for _, pc := range s.pcs {
			pc.Close()
		}
		for c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
}

// Reply is what a backend answers: who it is and what it saw. Tests assert on it, e.g. that
// a client behind NodePort without masquerade is seen with its real address.
type Reply struct {
	// Pod is the server's name (the pod's name for pod backends).
	Pod string
	// Proto is "tcp" or "udp".
	Proto string
	// Port is the local port the connection or datagram arrived on (after DNAT).
	Port uint16
	// To is the local address it arrived on (after DNAT).
	To netip.Addr
	// From is the remote address and port the server saw (after any SNAT).
	From netip.AddrPort
}

// String is the wire form, e.g.
// "pod=pod-1 proto=tcp port=80 to=198.18.128.11 from=198.18.1.2:40122".
func (r Reply) String() string {
	return fmt.Sprintf("pod=%s proto=%s port=%d to=%s from=%s", r.Pod, r.Proto, r.Port, r.To, r.From)
}

// ParseReply parses the wire form written by Reply.String.
func ParseReply(line string) (Reply, error) {
	var r Reply
	fields := strings.Fields(line)
	if len(fields) != 5 {
		return r, fmt.Errorf("reply %q: %d fields, want 5", line, len(fields))
	}
	seen := map[string]bool{}
	for _, f := range fields {
		k, v, ok := strings.Cut(f, "=")
		if !ok || v == "" || seen[k] {
			return r, fmt.Errorf("reply %q: bad field %q", line, f)
		}
		seen[k] = true
		var err error
		switch k {
		case "pod":
			r.Pod = v
		case "proto":
			r.Proto = v
		case "port":
			var p uint64
			p, err = strconv.ParseUint(v, 10, 16)
			r.Port = uint16(p)
		case "to":
			r.To, err = netip.ParseAddr(v)
		case "from":
			r.From, err = netip.ParseAddrPort(v)
		default:
			err = errors.New("unknown key")
		}
		if err != nil {
			return r, fmt.Errorf("reply %q: field %q: %w", line, f, err)
		}
	}
	return r, nil
}

func addrPort(a net.Addr) netip.AddrPort {
	switch a := a.(type) {
	case *net.TCPAddr:
		return unmap(a.AddrPort())
	case *net.UDPAddr:
		return unmap(a.AddrPort())
	}
	return netip.AddrPort{}
}

func unmap(ap netip.AddrPort) netip.AddrPort {
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
