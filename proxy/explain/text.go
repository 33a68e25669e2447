package explain

import (
	"fmt"
	"io"
	"net/netip"
	"strings"

	"github.com/nftproxy/nftproxy/nft/trace"
)

// verdictWords says what the sender sees.
func verdictWords(o trace.Outcome) string {
	switch o.Verdict {
	case trace.Accept:
		if len(o.DNAT) > 0 {
			return "accepted: DNATed to an endpoint"
		}
		return "accepted, not DNATed"
	case trace.Drop:
		return "dropped (the sender sees a timeout)"
	case trace.RejectTCPReset:
		return "rejected with a TCP reset"
	case trace.RejectICMP:
		return "rejected with ICMP port unreachable"
	}
	return string(o.Verdict)
}

// WriteAnswer writes the answer for a person, one fact a line; it is the text of `nftproxy explain
// DST:PORT/PROTO`. rejections are listed when the packet met no Service (one of them may be
// the Service meant).
func (n *Node) WriteAnswer(w io.Writer, a Answer, indent string) {
	p := a.Packet
	from := "from " + p.Saddr.String()
	switch {
	case p.Local:
		from += " (this node)"
	case p.Saddr == Outside(p.Daddr):
		from += " (a client outside the cluster; --from SRC asks for another)"
	}
	fmt.Fprintf(w, "%s%s %s -> %s, %s\n", indent, trace.ProtoName(p.Proto), from, hostPort(p), tableWords(a))
	in := indent + "  "
	if a.Err != nil {
		fmt.Fprintf(w, "%serror: %v\n", in, a.Err)
		if a.Outcome.Verdict == "" {
			return
		}
	}
	if a.Port != "" {
		every := ""
		if strings.HasSuffix(a.Frontend, "all-ports") {
			every = "; every port of the protocol goes the same way"
		}
		fmt.Fprintf(w, "%sservice port: %s (%s%s)\n", in, a.Port, a.Frontend, every)
	} else {
		fmt.Fprintf(w, "%sservice port: none: no Service of nftproxy's has this address and port\n", in)
	}
	fmt.Fprintf(w, "%schains: %s\n", in, strings.Join(a.Chains, " > "))
	fmt.Fprintf(w, "%sverdict: %s\n", in, verdictWords(a.Outcome))
	if len(a.Spread) > 0 {
		fmt.Fprintf(w, "%sendpoints (share of new connections):\n", in)
		for _, d := range sortedSpread(a.Spread) {
			kept := ""
			if _, err := netip.ParseAddr(d); err == nil {
				kept = " (on the packet's own port)"
			}
			fmt.Fprintf(w, "%s  %-40s %5.1f%%%s\n", in, d, 100*a.Spread[d], kept)
		}
	}
	if a.Outcome.Masquerade {
		fmt.Fprintf(w, "%smasquerade: yes, the source becomes the node's address: %s\n", in, strings.Join(a.Masquerade, "; "))
	} else if a.Outcome.Verdict == trace.Accept && len(a.Outcome.DNAT) > 0 {
		fmt.Fprintf(w, "%smasquerade: no, the endpoint sees %s\n", in, p.Saddr)
	}
	for _, r := range a.Reasons {
		fmt.Fprintf(w, "%sbecause: %s\n", in, r)
	}
	if a.Port == "" {
		n.writeRejections(w, in, "Services the daemon does not program here (one may be the one meant):")
	}
}

// WriteService writes a ServiceAnswer: the text of `nftproxy explain NAMESPACE/NAME`.
func (n *Node) WriteService(w io.Writer, s ServiceAnswer) {
	fmt.Fprintf(w, "Service %s\n", s.Service)
	for _, r := range s.Rejections {
		what := "not programmed: rejected"
		if r.Partial {
			what = "programmed in part: the rest is rejected"
		}
		fmt.Fprintf(w, "  %s (%s): %s\n", what, r.Reason, r.Message)
	}
	if len(s.Frontends) == 0 && len(s.Rejections) == 0 {
		fmt.Fprintf(w, "  nothing in the kernel's nftproxy tables, and the daemon reports no rejection of it: it does not exist, "+
			"is not handled here (headless, ExternalName, another service-proxy-name, a port-less Service), or is not synced yet\n")
	}
	if s.RejectionsErr != nil {
		fmt.Fprintf(w, "  the daemon's rejections could not be read (%v): a reason it was not programmed cannot be told\n", s.RejectionsErr)
	}
	for _, note := range s.Notes {
		fmt.Fprintf(w, "  %s\n", note)
	}
	for _, a := range s.Frontends {
		n.WriteAnswer(w, a, "  ")
	}
}

func (n *Node) writeRejections(w io.Writer, in, title string) {
	if n.RejectionsErr != nil {
		fmt.Fprintf(w, "%sthe daemon's rejections could not be read (%v)\n", in, n.RejectionsErr)
		return
	}
	rs := n.rejectionsSorted()
	if len(rs) == 0 {
		return
	}
	fmt.Fprintf(w, "%s%s\n", in, title)
	for _, r := range rs {
		part := ""
		if r.Partial {
			part = ", in part"
		}
		fmt.Fprintf(w, "%s  %s (%s%s): %s\n", in, r.Service, r.Reason, part, r.Message)
	}
}

func hostPort(p trace.Packet) string {
	if p.Daddr.Is4() {
		return fmt.Sprintf("%s:%d", p.Daddr, p.Dport)
	}
	return fmt.Sprintf("[%s]:%d", p.Daddr, p.Dport)
}

func tableWords(a Answer) string {
	if a.Table.Name == "" {
		return "no table"
	}
	return "table " + a.Table.String()
}
