// Package annotation parses nftproxy's Service annotations: port ranges, all-ports and node-port
// blocks. It knows only the annotation syntax; whether a parsed range fits the Service it is on
// (port names, start equal to the port, overlaps) is decided by the model package.
//
// Range syntax, shared by port-ranges and node-port-ranges:
//
//	name=start-end[,name=start-end...]
//
// Whitespace around entries, names and numbers is ignored ("rtp = 16384 - 32767, sip=5060-5559"
// is accepted) because annotations are hand-written in YAML, where stray spaces after commas are
// common. Numbers are decimal without sign. A range of width one is written "sip=5060-5060". An
// empty or all-whitespace value holds no ranges. FormatRanges writes the canonical form, without
// spaces.
package annotation

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Annotation and label keys nftproxy reads from Services.
const (
	// PortRangesKey turns named ServicePorts into port ranges: "rtp=16384-32767,sip=5060-5559".
	PortRangesKey = "nftproxy.io/port-ranges"
	// AllPortsKey, set to "true", forwards every port of the listed protocols.
	AllPortsKey = "nftproxy.io/all-ports"
	// NodePortRangesKey records (or requests) the node-port block of each ranged port.
	NodePortRangesKey = "nftproxy.io/node-port-ranges"
	// ServiceProxyNameLabel selects which proxy handles a Service (upstream's label).
	ServiceProxyNameLabel = "service.kubernetes.io/service-proxy-name"
)

// MaxPort is the largest TCP/UDP/SCTP port.
const MaxPort = 65535

// PortRange is one entry of a range annotation: the ServicePort Name and the inclusive range
// Start..End, with 1 <= Start <= End <= 65535 after a successful parse.
type PortRange struct {
	Name  string
	Start uint16
	End   uint16
}

// Width is the number of ports in the range.
func (r PortRange) Width() int { return int(r.End) - int(r.Start) + 1 }

// String returns the canonical entry "name=start-end".
func (r PortRange) String() string {
	return r.Name + "=" + strconv.Itoa(int(r.Start)) + "-" + strconv.Itoa(int(r.End))
}

// ErrorKind classifies a syntax error so callers can map it to a stable label (a metric
// reason) without matching message text.
type ErrorKind int

// Kinds of range and boolean annotation errors.
const (
	// EmptyEntry: an entry between commas is empty ("a=1-2,,b=3-4" or a trailing comma).
	EmptyEntry ErrorKind = iota + 1
	// MissingEquals: an entry has no '=' between name and range.
	MissingEquals
	// EmptyName: nothing before the '='.
	EmptyName
	// MissingDash: the range has no '-' between start and end.
	MissingDash
	// NotANumber: start or end is not a decimal number.
	NotANumber
	// StartZero: the range starts at port 0.
	StartZero
	// EndTooLarge: the range ends above 65535.
	EndTooLarge
	// EndBeforeStart: end < start.
	EndBeforeStart
	// DuplicateName: two entries name the same port.
	DuplicateName
	// NotABool: a boolean annotation is neither "true" nor "false".
	NotABool
)

var kindText = map[ErrorKind]string{
	EmptyEntry:     "empty entry; remove the extra comma",
	MissingEquals:  "missing '='; write name=start-end",
	EmptyName:      "empty port name before '='; write name=start-end",
	MissingDash:    "missing '-' in range; write name=start-end (start-start for one port)",
	NotANumber:     "not a number; ports are decimal 1-65535",
	StartZero:      "start is 0; ports start at 1",
	EndTooLarge:    "port above 65535",
	EndBeforeStart: "end before start",
	DuplicateName:  "duplicate port name; name each port once",
	NotABool:       `not a boolean; use "true" or "false"`,
}

// String describes the kind and what to do about it.
func (k ErrorKind) String() string {
	if s, ok := kindText[k]; ok {
		return s
	}
	return "unknown error kind " + strconv.Itoa(int(k))
}

// Error is a syntax error in one entry of an annotation value. Its message names the entry so a
// user can find it in a long value; Kind lets callers classify it.
type Error struct {
	// Entry is the offending entry as written (trimmed), or the whole value for booleans.
	Entry string
	// Index is the entry's position, counting from 0.
	Index int
	Kind  ErrorKind
	// Detail adds specifics such as the number that failed, may be empty.
	Detail string
}

// Error returns e.g. `entry 0 "rtp=16384-1000": end before start (end 1000 < start 16384)`.
func (e *Error) Error() string {
	if e.Kind == NotABool {
		return fmt.Sprintf("%q: %s", e.Entry, e.Kind)
	}
	msg := fmt.Sprintf("entry %d %q: %s", e.Index, e.Entry, e.Kind)
	if e.Detail != "" {
		msg += " (" + e.Detail + ")"
	}
	return msg
}

// KindOf returns the ErrorKind of err if it is (or wraps) an *Error, and 0 otherwise.
func KindOf(err error) ErrorKind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return 0
}

// ParseRanges parses a port-ranges or node-port-ranges value. It returns the entries in the
// order written, or the first error found, naming the entry.
func ParseRanges(value string) ([]PortRange, error) {
	if strings.TrimSpace(value) == "" {
		return nil, nil
	}
	parts := strings.Split(value, ",")
	out := make([]PortRange, 0, len(parts))
	seen := make(map[string]int, len(parts))
	for i, raw := range parts {
		entry := strings.TrimSpace(raw)
		r, err := parseEntry(entry, i)
		if err != nil {
			return nil, err
		}
		if first, dup := seen[r.Name]; dup {
			return nil, &Error{Entry: entry, Index: i, Kind: DuplicateName,
				Detail: fmt.Sprintf("%q is also entry %d", r.Name, first)}
		}
		seen[r.Name] = i
		out = append(out, r)
	}
	return out, nil
}

func parseEntry(entry string, i int) (PortRange, error) {
	fail := func(k ErrorKind, detail string) (PortRange, error) {
		return PortRange{}, &Error{Entry: entry, Index: i, Kind: k, Detail: detail}
	}
	if entry == "" {
		return fail(EmptyEntry, "")
	}
	name, rng, ok := strings.Cut(entry, "=")
	if !ok {
		return fail(MissingEquals, "")
	}
	name = strings.TrimSpace(name)
	if name == "" {
		return fail(EmptyName, "")
	}
	startText, endText, ok := strings.Cut(rng, "-")
	if !ok {
		return fail(MissingDash, "")
	}
	start, err := parsePort(startText)
	if err != nil {
		return fail(NotANumber, "start "+strconv.Quote(strings.TrimSpace(startText)))
	}
	end, err := parsePort(endText)
	if err != nil {
		return fail(NotANumber, "end "+strconv.Quote(strings.TrimSpace(endText)))
	}
	switch {
	case start == 0:
		return fail(StartZero, "")
	case start > MaxPort:
		return fail(EndTooLarge, fmt.Sprintf("start %d > %d", start, MaxPort))
	case end > MaxPort:
		return fail(EndTooLarge, fmt.Sprintf("end %d > %d", end, MaxPort))
	case end < start:
		return fail(EndBeforeStart, fmt.Sprintf("end %d < start %d", end, start))
	}
	return PortRange{Name: name, Start: uint16(start), End: uint16(end)}, nil
}

// parsePort parses a decimal number without sign. Values above 65535 are returned as they are
// (capped to avoid overflow) so the caller can say "too large" rather than "not a number".
func parsePort(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, errors.New("empty")
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, errors.New("not decimal")
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil {
		// Only overflow is left: all digits, too many of them.
		return MaxPort + 1, nil
	}
	return n, nil
}

// FormatRanges writes ranges in the canonical form ParseRanges reads: "a=1-2,b=3-4".
func FormatRanges(ranges []PortRange) string {
	parts := make([]string, len(ranges))
	for i, r := range ranges {
		parts[i] = r.String()
	}
	return strings.Join(parts, ",")
}

// ParseBool parses the all-ports value. Only "true" and "false" (surrounding whitespace
// ignored) are accepted: a typo such as "yes" must not silently leave a Service half-configured.
func ParseBool(value string) (bool, error) {
	switch strings.TrimSpace(value) {
	case "true":
		return true, nil
	case "false":
		return false, nil
	}
	return false, &Error{Entry: value, Kind: NotABool}
}
