package nft

import (
	"fmt"
	"net/netip"
	"strings"
)

// renderExpr writes one expression in the syntax nft 1.0.6 reads (and, up to nft's own listing
// shortcuts such as "tcp dport" for "meta l4proto tcp th dport", prints).
func renderExpr(f Family, e Expr) string {
	switch x := e.(type) {
	case Cmp:
		return renderField(f, x.Field) + renderNeg(x.Neg) + " " + renderValue(x.Value)
	case CmpPrefix:
		return renderField(f, x.Field) + renderNeg(x.Neg) + " " + renderPrefix(x.Prefix)
	case CmpSet:
		return renderFields(f, x.Fields) + renderNeg(x.Neg) + " @" + renderName(x.Set)
	case VMap:
		return renderFields(f, x.Fields) + " vmap @" + renderName(x.Map)
	case MarkTest:
		op := "=="
		if x.NonZero {
			op = "!="
		}
		return fmt.Sprintf("meta mark & 0x%08x %s 0x00000000", x.Mask, op)
	case CtState:
		return "ct state " + renderBits(x.Mask, renderCtStateNames())
	case CtStatus:
		return "ct status " + renderBits(x.Mask, renderCtStatusNames())
	case FibAddrType:
		dir := "saddr"
		if x.Daddr {
			dir = "daddr"
		}
		return "fib " + dir + " type" + renderNeg(x.Neg) + " local"
	case MarkOr:
		return fmt.Sprintf("meta mark set meta mark | 0x%08x", x.Bits)
	case MarkXor:
		return fmt.Sprintf("meta mark set meta mark ^ 0x%08x", x.Bits)
	case Masquerade:
		if x.FullyRandom {
			return "masquerade fully-random"
		}
		return "masquerade"
	case DNAT:
		return "dnat to " + renderNATAddr(f, x.Addr, x.Port)
	case DNATNumgen:
		if x.Modulus == 0 {
			return renderLoud("bad-numgen", "numgen modulus 0")
		}
		if !ValidNumgenKey(x.Key) {
			return renderLoud("bad-numgen-key", fmt.Sprintf("numgen map key fields %v", x.Key))
		}
		to := "dnat to"
		if x.WithPort {
			to = "dnat " + f.String() + " to"
		}
		key := ""
		if len(x.Key) > 0 {
			key = renderFields(f, x.Key) + " . "
		}
		return fmt.Sprintf("%s %snumgen random mod %d map @%s", to, key, x.Modulus, renderName(x.Map))
	case NumgenMatch:
		if x.Modulus == 0 {
			return renderLoud("bad-numgen", "numgen modulus 0")
		}
		return fmt.Sprintf("numgen random mod %d %d", x.Modulus, x.Value)
	case Reject:
		if x.TCPReset {
			return "reject with tcp reset"
		}
		return "reject"
	case SetUpdate:
		out := "update @" + renderName(x.Set) + " { " + renderFields(f, x.Fields)
		if x.Timeout > 0 {
			out += " timeout " + renderDuration(x.Timeout)
		}
		if len(x.Data) > 0 {
			vals := make([]string, len(x.Data))
			for k, v := range x.Data {
				vals[k] = renderValue(v)
			}
			out += " : " + strings.Join(vals, " . ")
		}
		if len(x.DataFields) > 0 {
			out += " : " + renderFields(f, x.DataFields)
		}
		return out + " }"
	case DNATMap:
		to := "dnat to"
		if x.WithPort {
			to = "dnat " + f.String() + " to"
		}
		port := ""
		if x.Port != 0 {
			port = fmt.Sprintf(":%d", x.Port)
		}
		return fmt.Sprintf("%s %s map @%s%s", to, renderFields(f, x.Fields), renderName(x.Map), port)
	case SocketMatch:
		key := "transparent"
		switch x.Key {
		case SocketTransparent:
		case SocketWildcard:
			key = "wildcard"
		default:
			return renderLoud("bad-socket-key", fmt.Sprintf("socket key %d", x.Key))
		}
		if x.Value {
			return "socket " + key + " 1"
		}
		return "socket " + key + " 0"
	case Redirect:
		if x.Port == 0 {
			return renderLoud("bad-redirect", "redirect without a port")
		}
		return fmt.Sprintf("redirect to :%d", x.Port)
	case Verdict:
		return renderVerdict(x)
	case Unknown:
		return renderLoud("unknown-expression", x.Description)
	case nil:
		return renderLoud("nil-expression", "a rule holds a nil Expr")
	}
	return renderLoud("unrenderable-expression", fmt.Sprintf("%T", e))
}

func renderNeg(neg bool) string {
	if neg {
		return " !="
	}
	return ""
}

func renderField(f Family, fl Field) string {
	ip := "ip"
	if f == IPv6 {
		ip = "ip6"
	}
	switch fl {
	case FieldSaddr:
		return ip + " saddr"
	case FieldDaddr:
		return ip + " daddr"
	case FieldL4Proto:
		return "meta l4proto"
	case FieldSport:
		return "th sport"
	case FieldDport:
		return "th dport"
	case FieldMark:
		return "meta mark"
	case FieldCtOrigDaddr:
		return "ct original " + ip + " daddr"
	case FieldCtOrigProtoDst:
		return "ct original proto-dst"
	case FieldCtReplySaddr:
		return "ct reply " + ip + " saddr"
	case FieldCtReplyProtoSrc:
		return "ct reply proto-src"
	}
	return renderLoud("bad-field", fmt.Sprintf("field %d", fl))
}

func renderFields(f Family, fs []Field) string {
	if len(fs) == 0 {
		return renderLoud("no-fields", "a lookup needs at least one field")
	}
	parts := make([]string, len(fs))
	for i, fl := range fs {
		parts[i] = renderField(f, fl)
	}
	return strings.Join(parts, " . ")
}

func renderPrefix(p netip.Prefix) string {
	if !p.IsValid() {
		return renderLoud("bad-prefix", p.String())
	}
	return p.Masked().String()
}

func renderNATAddr(f Family, a netip.Addr, port uint16) string {
	if !a.IsValid() {
		return renderLoud("bad-address", "dnat without an address")
	}
	a = a.Unmap()
	if (f == IPv6) != a.Is6() {
		return renderLoud("bad-address", a.String()+" in a "+f.String()+" table")
	}
	if port == 0 {
		return a.String()
	}
	if a.Is6() {
		return fmt.Sprintf("[%s]:%d", a, port)
	}
	return fmt.Sprintf("%s:%d", a, port)
}

func renderVerdict(v Verdict) string {
	switch v.Kind {
	case VerdictAccept:
		return "accept"
	case VerdictDrop:
		return "drop"
	case VerdictReturn:
		return "return"
	case VerdictContinue:
		return "continue"
	case VerdictJump:
		return "jump " + renderName(v.Chain)
	case VerdictGoto:
		return "goto " + renderName(v.Chain)
	}
	return renderLoud("bad-verdict", fmt.Sprintf("verdict kind %d", v.Kind))
}

type renderBitName struct {
	bit  uint32
	name string
}

// renderCtStateNames are nft's names for ct state bits, in the order nft lists them.
func renderCtStateNames() []renderBitName {
	return []renderBitName{
		{CtStateInvalid, "invalid"}, {CtStateEstablished, "established"}, {CtStateRelated, "related"},
		{CtStateNew, "new"}, {CtStateUntracked, "untracked"},
	}
}

// renderCtStatusNames are nft's names for ct status bits, in the order nft lists them.
func renderCtStatusNames() []renderBitName {
	return []renderBitName{
		{0x1, "expected"}, {0x2, "seen-reply"}, {0x4, "assured"}, {0x8, "confirmed"},
		{CtStatusSNAT, "snat"}, {CtStatusDNAT, "dnat"}, {0x200, "dying"},
	}
}

// renderBits writes a bit mask as nft's comma list of names; bits without a name, or an empty
// mask, make the text fail loudly.
func renderBits(mask uint32, names []renderBitName) string {
	if mask == 0 {
		return renderLoud("empty-mask", "a ct match needs at least one bit")
	}
	var parts []string
	rest := mask
	for _, n := range names {
		if mask&n.bit != 0 {
			parts = append(parts, n.name)
			rest &^= n.bit
		}
	}
	if rest != 0 {
		parts = append(parts, renderLoud("unnamed-bits", fmt.Sprintf("0x%x", rest)))
	}
	out := strings.Join(parts, ",")
	return out
}
