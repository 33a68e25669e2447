package property

import "strings"

const (
	lower  = "abcdefghijklmnopqrstuvwxyz"
	alnum  = lower + "0123456789"
	inside = alnum + "-"

	// The API's maxima: a namespace is a DNS-1123 label, a Service name a DNS-1035 label, a
	// port name an IANA_SVC_NAME.
	maxNamespace = 63
	maxName      = 63
	maxPortName  = 15
	// Short names stay inside these lengths unless ShapeLongNames is drawn.
	shortNamespace = 12
	shortName      = 16
	shortPortName  = 8
)

// label draws a DNS label of length n: first character from first, last alphanumeric, dashes
// inside but never two in a row (IANA_SVC_NAME forbids "--"; DNS labels allow it, but one rule
// for all keeps the generator simple).
func (g *gen) label(n int, first string) string {
	var sb strings.Builder
	sb.WriteByte(first[g.r.IntN(len(first))])
	for i := 1; i < n; i++ {
		set := inside
		if i == n-1 || sb.String()[sb.Len()-1] == '-' {
			set = alnum
		}
		sb.WriteByte(set[g.r.IntN(len(set))])
	}
	return sb.String()
}

// length draws a name length: short ones in 1..short; long ones above short up to max, a
// quarter of them exactly max.
func (g *gen) length(long bool, short, max int) int {
	if !long {
		return 1 + g.r.IntN(short)
	}
	if g.chance(0.25) {
		return max
	}
	return short + 1 + g.r.IntN(max-short)
}

func (g *gen) namespaceName() string {
	return g.label(g.length(false, shortNamespace, maxNamespace), alnum)
}

// serviceName picks a namespace (shared by several Services, or a long one of its own) and a
// unique DNS-1035 name in it.
func (g *gen) serviceName(long bool) (string, string) {
	for {
		ns := g.nsPool[g.r.IntN(len(g.nsPool))]
		if long {
			ns = g.label(g.length(true, shortNamespace, maxNamespace), alnum)
		}
		name := g.label(g.length(long, shortName, maxName), lower)
		if k := ns + "/" + name; !g.names[k] {
			g.names[k] = true
			return ns, name
		}
	}
}

// portName draws an IANA_SVC_NAME (it must hold a letter) unique among taken.
func (g *gen) portName(long bool, taken map[string]bool) string {
	for {
		n := g.label(g.length(long, shortPortName, maxPortName), lower)
		if !taken[n] {
			taken[n] = true
			return n
		}
	}
}

// labelValue is a label value at or under the 63-character maximum.
func (g *gen) labelValue() string {
	if g.chance(0.2) {
		return g.label(63, alnum)
	}
	return g.label(1+g.r.IntN(20), alnum)
}

// annotationValue: annotation values are free text, so they carry multi-byte characters,
// quotes and newlines; nothing of them may reach the kernel, and nothing may break because of them.
func (g *gen) annotationValue() string {
	values := []string{"team-a", "Ünïcødé ☃ 服务 \"quoted\"\nsecond line", strings.Repeat("é", 300), ""}
	return values[g.r.IntN(len(values))]
}
