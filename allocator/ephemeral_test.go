package allocator

import (
	"reflect"
	"testing"
)

func TestEphemeralOverlap(t *testing.T) {
	eph := MustParseRange("32768-60999")
	rs := func(s ...string) []Range {
		var out []Range
		for _, x := range s {
			out = append(out, MustParseRange(x))
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		r, eph    Range
		reserved  []Range
		want      []Range
		wantPorts int
	}{
		{"defaults are disjoint", MustParseRange("30000-32767"), eph, nil, nil, 0},
		{"unknown ephemeral range", MustParseRange("30000-32767"), Range{}, nil, nil, 0},
		{"no range", Range{}, eph, nil, nil, 0},
		{"node ports inside", MustParseRange("30000-32767"), MustParseRange("30000-40000"), nil, rs("30000-32767"), 2768},
		{"partly", MustParseRange("30000-32767"), MustParseRange("32000-40000"), nil, rs("32000-32767"), 768},
		{"reserved hole", MustParseRange("30000-32767"), MustParseRange("30000-40000"), rs("31000-31999"), rs("30000-30999", "32000-32767"), 2768 - 1000},
		{"reserved unsorted, touching and beyond", MustParseRange("30000-32767"), MustParseRange("30000-40000"),
			rs("32700-50000", "30000-30000", "30001-30009", "1-100"), rs("30010-32699"), 2690},
		{"fully reserved", MustParseRange("30000-32767"), MustParseRange("30000-40000"), rs("29000-33000"), nil, 0},
		{"one port", MustParseRange("40000-40000"), eph, nil, rs("40000-40000"), 1},
		{"reserved one port", MustParseRange("40000-40000"), eph, rs("40000-40000"), nil, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := EphemeralOverlap(tc.r, tc.eph, tc.reserved)
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("EphemeralOverlap(%v, %v, %v) = %v, want %v", tc.r, tc.eph, tc.reserved, got, tc.want)
			}
			if n := RangesSize(got); n != tc.wantPorts {
				t.Errorf("RangesSize = %d, want %d", n, tc.wantPorts)
			}
		})
	}
}

func TestParseLocalPorts(t *testing.T) {
	r := MustParseRange
	ranges := []struct {
		in   string
		want Range
		bad  bool
	}{
		{in: "32768\t60999\n", want: r("32768-60999")},
		{in: "1024 65535", want: r("1024-65535")},
		{in: "60999 32768", bad: true},
		{in: "32768", bad: true},
		{in: "", bad: true},
	}
	for _, tc := range ranges {
		got, err := ParseLocalPortRange(tc.in)
		if tc.bad != (err != nil) || (!tc.bad && got != tc.want) {
			t.Errorf("ParseLocalPortRange(%q) = %v, %v; want %v (error expected: %v)", tc.in, got, err, tc.want, tc.bad)
		}
	}
	reserved := []struct {
		in   string
		want []Range
		bad  bool
	}{
		{in: "\n"},
		{in: "8080\n", want: []Range{r("8080-8080")}},
		{in: "1000-2000,3000", want: []Range{r("1000-2000"), r("3000-3000")}},
		{in: "x", bad: true},
		{in: "2000-1000", bad: true},
	}
	for _, tc := range reserved {
		got, err := ParseReservedPorts(tc.in)
		if tc.bad != (err != nil) || (!tc.bad && !reflect.DeepEqual(got, tc.want)) {
			t.Errorf("ParseReservedPorts(%q) = %v, %v; want %v (error expected: %v)", tc.in, got, err, tc.want, tc.bad)
		}
	}
}
