package allocator

import (
	"fmt"
	"strconv"
	"strings"
)

// MaxPort is the highest TCP/UDP/SCTP port number; no range may reach past it.
const MaxPort = 65535

// Band formula constants from KEP-3668: offset = min(max(bandMin, size/bandStep), bandMax).
const (
	bandMin  = 16
	bandMax  = 128
	bandStep = 32
)

// Range is an inclusive span of ports, First through Last. It is the unit of configuration
// ("30000-32767") and also the shape of a contiguous block handed to a port-range Service, so the
// same parser and printer serve the flag, the annotation and the snapshot.
type Range struct {
	First int
	Last  int
}

// ParseRange reads "N1-N2" (inclusive at both ends, 1 <= N1 <= N2 <= 65535). Each kind of
// mistake gets its own message, so an operator who typed the flag wrong sees what to fix. The
// returned error wraps ErrInvalidRange.
func ParseRange(s string) (Range, error) {
	orig := s
	s = strings.TrimSpace(s)
	if s == "" {
		return Range{}, rangeErr(orig, `is empty; want "first-last", e.g. "30000-32767"`)
	}
	lo, hi, ok := strings.Cut(s, "-")
	if !ok {
		return Range{}, rangeErr(orig, `has no "-"; want "first-last", e.g. "30000-32767" (a single port is "30000-30000")`)
	}
	first, err := parsePort(lo)
	if err != nil {
		return Range{}, rangeErr(orig, "first port "+err.Error())
	}
	last, err := parsePort(hi)
	if err != nil {
		return Range{}, rangeErr(orig, "last port "+err.Error())
	}
	r := Range{First: first, Last: last}
	if err := r.Validate(); err != nil {
		return Range{}, err
	}
	return r, nil
}

// parsePort reads one decimal port number. Signs, spaces and hex are refused so that "-5" or
// "0x10" cannot slip through strconv's more liberal forms.
func parsePort(s string) (int, error) {
	if s == "" {
		return 0, fmt.Errorf("is missing")
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, fmt.Errorf("%q is not a decimal number", s)
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > MaxPort {
		return 0, fmt.Errorf("%q is above %d", s, MaxPort)
	}
	if n == 0 {
		return 0, fmt.Errorf("is 0; ports start at 1")
	}
	return n, nil
}

// MustParseRange is ParseRange for constants in tests and defaults; it panics on a bad literal,
// which is a programming error rather than an input error.
func MustParseRange(s string) Range {
	r, err := ParseRange(s)
	if err != nil {
		panic(err)
	}
	return r
}

// Validate reports whether r is a usable range, so ranges built in code (not parsed) get the same
// checks as parsed ones.
func (r Range) Validate() error {
	switch {
	case r.First < 1 || r.First > MaxPort:
		return rangeErr(r.String(), fmt.Sprintf("first port %d is outside 1-%d", r.First, MaxPort))
	case r.Last < 1 || r.Last > MaxPort:
		return rangeErr(r.String(), fmt.Sprintf("last port %d is outside 1-%d", r.Last, MaxPort))
	case r.Last < r.First:
		return rangeErr(r.String(), fmt.Sprintf("ends (%d) before it starts (%d); write the lower port first", r.Last, r.First))
	}
	return nil
}

func rangeErr(s, why string) error {
	return fmt.Errorf("%w %q: %s", ErrInvalidRange, s, why)
}

// Size is the number of ports in r (both ends count).
func (r Range) Size() int { return r.Last - r.First + 1 }

// Contains reports whether port p lies in r.
func (r Range) Contains(p int) bool { return p >= r.First && p <= r.Last }

// Overlaps reports whether r and o share at least one port.
func (r Range) Overlaps(o Range) bool { return r.First <= o.Last && o.First <= r.Last }

// String prints r the way ParseRange reads it, and the way the
// nftproxy.io/node-port-ranges annotation records a block.
func (r Range) String() string { return strconv.Itoa(r.First) + "-" + strconv.Itoa(r.Last) }

// MarshalText writes r as "first-last", so snapshots and JSON read like the flag and annotation.
func (r Range) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText reads "first-last" with ParseRange's checks.
func (r *Range) UnmarshalText(b []byte) error {
	v, err := ParseRange(string(b))
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// BandOffset is the number of ports at the bottom of a range of the given size that KEP-3668
// sets aside for static (user-chosen) ports: min(max(16, size/32), 128), with integer division
// rounding down. A range of 16 ports or fewer has no bands (offset 0): the formula would give a
// static band covering the whole range, leaving no dynamic band, which behaves the same as a
// single pool, so both ports kinds share the whole range.
//
// Worked examples (size counts both ends, size = N2-N1+1):
//
//	30000-32767: size 2768,  2768/32  = 86.5 -> 86;  static 30000-30085, dynamic from 30086
//	20000-32767: size 12768, 12768/32 = 399  -> 128; static 20000-20127, dynamic from 20128
//	32567-32767: size 201,   201/32   = 6.3  -> 16;  static 32567-32582, dynamic from 32583
//
// The KEP's text computes size as N2-N1 (2767, 12767, 200) and names the first dynamic port as
// the "static band end" (30086, 20128, 32583). Because the division rounds down, the off-by-one
// in size changes none of the three offsets, and the band holds exactly offset ports, ending
// one below the port the KEP prints.
func BandOffset(size int) int {
	if size <= bandMin {
		return 0
	}
	return min(max(bandMin, size/bandStep), bandMax)
}

// StaticBand is the lower band of r, preferred for user-chosen ports; empty (Size 0) when r is
// too small to have bands.
func (r Range) StaticBand() Range {
	return Range{First: r.First, Last: r.First + BandOffset(r.Size()) - 1}
}

// DynamicBand is the upper band of r, where ports picked by the allocator go first; all of r
// when r has no bands.
func (r Range) DynamicBand() Range {
	return Range{First: r.First + BandOffset(r.Size()), Last: r.Last}
}
