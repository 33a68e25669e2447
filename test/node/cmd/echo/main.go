// Command echo is the node tier's backend: on every TCP connection and UDP datagram it answers
// one line naming its pod (POD_NAME, from the downward API), the protocol, the address and port
// the packet arrived on and the peer it saw — test/lab's Reply format, so the tier's probes
// parse it as the lab's. A TCP connection gets a new line for every line it sends, so a
// long-lived connection can be probed again and again.
//
//	echo -ports 8080,9000-9004
package main

import (
	"bufio"
	"flag"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nftproxy/nftproxy/test/lab"
)

func main() {
	ports := flag.String("ports", "8080", "TCP and UDP ports to answer on: comma-separated ports and FIRST-LAST ranges")
	flag.Parse()
	pod := os.Getenv("POD_NAME")
	if pod == "" {
		log.Fatal("POD_NAME is empty: set it from the downward API (metadata.name)")
	}
	list, err := parsePorts(*ports)
	if err != nil {
		log.Fatal(err)
	}
	for _, p := range list {
		ln, err := net.Listen("tcp4", ":"+strconv.Itoa(p))
		if err != nil {
			log.Fatal(err)
		}
		go accept(ln, pod)
		pc, err := net.ListenUDP("udp4", &net.UDPAddr{Port: p})
		if err != nil {
			log.Fatal(err)
		}
		go answer(pc, pod)
	}
	log.Printf("%s answering on %v", pod, list)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	<-sigs
	// Stay a moment after SIGTERM, as a web server draining would: the pod is already out of
	// its EndpointSlices, and connections still arriving from stale rules get answers.
	time.Sleep(2 * time.Second)
}

func parsePorts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		first, last, isRange := strings.Cut(f, "-")
		a, err := strconv.Atoi(first)
		if err != nil {
			return nil, fmt.Errorf("-ports %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = strconv.Atoi(last); err != nil {
				return nil, fmt.Errorf("-ports %q: %w", s, err)
			}
		}
		if a < 1 || b > 65535 || b < a || b-a > 64 {
			return nil, fmt.Errorf("-ports %q: want ports 1-65535, ranges of at most 65", s)
		}
		for p := a; p <= b; p++ {
			out = append(out, p)
		}
	}
	return out, nil
}

func accept(ln net.Listener, pod string) {
	for {
		c, err := ln.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go serve(c, pod)
	}
}

func serve(c net.Conn, pod string) {
	defer c.Close()
	local := addrPort(c.LocalAddr())
	line := lab.Reply{Pod: pod, Proto: "tcp", Port: local.Port(), To: local.Addr(), From: addrPort(c.RemoteAddr())}.String() + "\n"
	r := bufio.NewReader(c)
	for {
		_ = c.SetDeadline(time.Now().Add(10 * time.Minute))
		if _, err := c.Write([]byte(line)); err != nil {
			return
		}
		if _, err := r.ReadString('\n'); err != nil {
			return
		}
	}
}

// answer replies to each datagram. The socket is bound to the wildcard address, and a pod has
// one address, so the reply leaves from the address the datagram was sent to.
func answer(pc *net.UDPConn, pod string) {
	port := uint16(pc.LocalAddr().(*net.UDPAddr).Port)
	buf := make([]byte, 2048)
	for {
		_, from, err := pc.ReadFromUDPAddrPort(buf)
		if err != nil {
			continue
		}
		to := localAddr()
		line := lab.Reply{Pod: pod, Proto: "udp", Port: port, To: to, From: from}.String() + "\n"
		_, _ = pc.WriteToUDPAddrPort([]byte(line), from)
	}
}

// localAddr is the pod's own IPv4 address (its only non-loopback one).
func localAddr() netip.Addr {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			ip, _ := netip.AddrFromSlice(n.IP.To4())
			return ip
		}
	}
	return netip.IPv4Unspecified()
}

func addrPort(a net.Addr) netip.AddrPort {
	ap, _ := netip.ParseAddrPort(a.String())
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
}
