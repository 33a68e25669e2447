package annotation

import (
	"reflect"
	"strings"
	"testing"
)

func TestParseRanges(t *testing.T) {
	tests := []struct {
		name    string
		value   string
		want    []PortRange
		kind    ErrorKind
		inError string // substring the message must contain
	}{
		{name: "empty", value: "", want: nil},
		{name: "blank", value: "  ", want: nil},
		{name: "one", value: "rtp=16384-32767", want: []PortRange{{"rtp", 16384, 32767}}},
		{name: "two", value: "rtp=16384-32767,sip=5060-5559",
			want: []PortRange{{"rtp", 16384, 32767}, {"sip", 5060, 5559}}},
		{name: "whitespace tolerated", value: " rtp = 16384 - 32767 ,\tsip=5060-5559 ",
			want: []PortRange{{"rtp", 16384, 32767}, {"sip", 5060, 5559}}},
		{name: "width one", value: "a=1-1", want: []PortRange{{"a", 1, 1}}},
		{name: "full range", value: "a=1-65535", want: []PortRange{{"a", 1, 65535}}},
		{name: "end before start", value: "rtp=16384-1000", kind: EndBeforeStart,
			inError: `entry 0 "rtp=16384-1000": end before start`},
		{name: "end too large", value: "a=1-2,rtp=16384-65536", kind: EndTooLarge,
			inError: `entry 1 "rtp=16384-65536"`},
		{name: "huge number", value: "a=1-99999999999999999999999", kind: EndTooLarge},
		{name: "start too large", value: "a=70000-70001", kind: EndTooLarge},
		{name: "start zero", value: "a=0-10", kind: StartZero, inError: "start is 0"},
		{name: "not a number", value: "a=x-10", kind: NotANumber, inError: `start "x"`},
		{name: "end not a number", value: "a=1-1x", kind: NotANumber, inError: `end "1x"`},
		{name: "signed", value: "a=+1-10", kind: NotANumber},
		{name: "negative end", value: "a=1--10", kind: NotANumber},
		{name: "empty number", value: "a=-10", kind: NotANumber},
		{name: "duplicate", value: "a=1-2,a=3-4", kind: DuplicateName, inError: `"a" is also entry 0`},
		{name: "empty entry", value: "a=1-2,,b=3-4", kind: EmptyEntry, inError: "entry 1"},
		{name: "trailing comma", value: "a=1-2,", kind: EmptyEntry},
		{name: "missing equals", value: "a1-2", kind: MissingEquals},
		{name: "empty name", value: "=1-2", kind: EmptyName},
		{name: "missing dash", value: "a=5060", kind: MissingDash},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRanges(tc.value)
			if tc.kind != 0 {
				if err == nil {
					t.Fatalf("ParseRanges(%q) = %v, nil; want error kind %v", tc.value, got, tc.kind)
				}
				if k := KindOf(err); k != tc.kind {
					t.Fatalf("ParseRanges(%q) error kind = %v (%v); want %v", tc.value, k, err, tc.kind)
				}
				if !strings.Contains(err.Error(), tc.inError) {
					t.Fatalf("ParseRanges(%q) error = %q; want it to contain %q", tc.value, err, tc.inError)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseRanges(%q) error = %v; want %v", tc.value, err, tc.want)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Fatalf("ParseRanges(%q) = %v; want %v", tc.value, got, tc.want)
			}
		})
	}
}

func TestFormatRanges(t *testing.T) {
	tests := []struct {
		name string
		in   []PortRange
		want string
	}{
		{name: "none", in: nil, want: ""},
		{name: "two", in: []PortRange{{"rtp", 16384, 32767}, {"sip", 5060, 5559}},
			want: "rtp=16384-32767,sip=5060-5559"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := FormatRanges(tc.in); got != tc.want {
				t.Fatalf("FormatRanges(%v) = %q; want %q", tc.in, got, tc.want)
			}
		})
	}
}

func TestWidth(t *testing.T) {
	tests := []struct {
		r    PortRange
		want int
	}{
		{PortRange{"a", 1, 1}, 1},
		{PortRange{"a", 1, 65535}, 65535},
		{PortRange{"a", 40100, 40199}, 100},
	}
	for _, tc := range tests {
		t.Run(tc.r.String(), func(t *testing.T) {
			if got := tc.r.Width(); got != tc.want {
				t.Fatalf("Width(%v) = %d; want %d", tc.r, got, tc.want)
			}
		})
	}
}

func TestParseBool(t *testing.T) {
	tests := []struct {
		value   string
		want    bool
		wantErr bool
	}{
		{"true", true, false},
		{"false", false, false},
		{" true ", true, false},
		{"True", false, true},
		{"yes", false, true},
		{"", false, true},
		{"1", false, true},
	}
	for _, tc := range tests {
		t.Run(tc.value, func(t *testing.T) {
			got, err := ParseBool(tc.value)
			if (err != nil) != tc.wantErr || got != tc.want {
				t.Fatalf("ParseBool(%q) = %v, %v; want %v, error %v", tc.value, got, err, tc.want, tc.wantErr)
			}
			if tc.wantErr && KindOf(err) != NotABool {
				t.Fatalf("ParseBool(%q) error kind = %v; want %v", tc.value, KindOf(err), NotABool)
			}
		})
	}
}

// FuzzPortRanges checks the parser's invariants on arbitrary input: it never panics, every range
// it accepts lies within 1..65535 with start <= end and unique names, and formatting then parsing
// again gives the same ranges.
func FuzzPortRanges(f *testing.F) {
	for _, seed := range []string{
		"rtp=16384-32767,sip=5060-5559", " a = 1 - 2 ", "a=1-65535", "a=0-1", "a=2-1", "a=1-65536",
		"a=1-2,a=3-4", "a=1-2,,", "a", "=1-2", "a=-", "a=1-2-3", "a==1-2",
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, value string) {
		got, err := ParseRanges(value)
		if err != nil {
			if KindOf(err) == 0 {
				t.Fatalf("ParseRanges(%q) error %v has no kind", value, err)
			}
			return
		}
		names := map[string]bool{}
		for _, r := range got {
			if r.Start < 1 || r.End < r.Start {
				t.Fatalf("ParseRanges(%q) accepted %v; want 1 <= start <= end <= 65535", value, r)
			}
			if names[r.Name] {
				t.Fatalf("ParseRanges(%q) accepted duplicate name %q", value, r.Name)
			}
			names[r.Name] = true
		}
		again, err := ParseRanges(FormatRanges(got))
		if err != nil {
			t.Fatalf("re-parse of %q (from %q) failed: %v", FormatRanges(got), value, err)
		}
		if len(again) != len(got) || (len(got) > 0 && !reflect.DeepEqual(again, got)) {
			t.Fatalf("re-parse of %q = %v; want %v", FormatRanges(got), again, got)
		}
	})
}
