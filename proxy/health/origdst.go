package health

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"syscall"

	"golang.org/x/sys/unix"
)

// OriginalDst returns where the client of c sent its connection before the kernel's NAT rewrote
// it: the health-check node port a probe asked for, when nftproxy's rules redirected it to the
// listener. It reads conntrack's original tuple with getsockopt SO_ORIGINAL_DST (SOL_IP, for
// IPv4 and IPv4-mapped connections) or IP6T_SO_ORIGINAL_DST (SOL_IPV6, the same number); a
// connection nothing translated gets its own local address back, and one conntrack does not
// track an ENOENT.
func OriginalDst(c net.Conn) (netip.AddrPort, error) {
	sc, ok := c.(syscall.Conn)
	if !ok {
		return netip.AddrPort{}, fmt.Errorf("original destination of a %T: not a socket", c)
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	local, _ := c.LocalAddr().(*net.TCPAddr)
	v4 := local != nil && local.IP.To4() != nil
	var out netip.AddrPort
	var serr error
	if err := rc.Control(func(fd uintptr) { out, serr = originalDst(int(fd), v4) }); err != nil {
		return netip.AddrPort{}, err
	}
	if serr != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination of the connection from %v: %w", c.RemoteAddr(), serr)
	}
	return out, nil
}

// originalDst reads the socket option. The buffers are those of getsockopt helpers of
// x/sys/unix with room for the kernel's answer: a sockaddr_in fits IPv6Mreq (20 bytes), a
// sockaddr_in6 IPv6MTUInfo (32 bytes, the address first).
func originalDst(fd int, v4 bool) (netip.AddrPort, error) {
	if v4 {
		m, err := unix.GetsockoptIPv6Mreq(fd, unix.SOL_IP, unix.SO_ORIGINAL_DST)
		if err != nil {
			return netip.AddrPort{}, fmt.Errorf("getsockopt SO_ORIGINAL_DST: %w", err)
		}
		// struct sockaddr_in: family, port (network order), address.
		if fam := binary.NativeEndian.Uint16(m.Multiaddr[0:2]); fam != unix.AF_INET {
			return netip.AddrPort{}, fmt.Errorf("getsockopt SO_ORIGINAL_DST: address family %d, want %d", fam, unix.AF_INET)
		}
		a := netip.AddrFrom4([4]byte(m.Multiaddr[4:8]))
		return netip.AddrPortFrom(a, binary.BigEndian.Uint16(m.Multiaddr[2:4])), nil
	}
	i, err := unix.GetsockoptIPv6MTUInfo(fd, unix.SOL_IPV6, unix.SO_ORIGINAL_DST)
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("getsockopt IP6T_SO_ORIGINAL_DST: %w", err)
	}
	if i.Addr.Family != unix.AF_INET6 {
		return netip.AddrPort{}, errors.New("getsockopt IP6T_SO_ORIGINAL_DST: not an IPv6 address")
	}
	var port [2]byte
	binary.NativeEndian.PutUint16(port[:], i.Addr.Port) // the raw network-order bytes
	return netip.AddrPortFrom(netip.AddrFrom16(i.Addr.Addr), binary.BigEndian.Uint16(port[:])), nil
}
