package allocator

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestParseRange(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Range
		wantErr string // substring of the message; empty means success
	}{
		{name: "default", in: "30000-32767", want: Range{30000, 32767}},
		{name: "single port", in: "30000-30000", want: Range{30000, 30000}},
		{name: "whole port space", in: "1-65535", want: Range{1, 65535}},
		{name: "surrounding spaces", in: " 30000-32767\n", want: Range{30000, 32767}},
		{name: "empty", in: "", wantErr: "is empty"},
		{name: "no dash", in: "30000", wantErr: `has no "-"`},
		{name: "missing first", in: "-32767", wantErr: "first port is missing"},
		{name: "missing last", in: "30000-", wantErr: "last port is missing"},
		{name: "letters", in: "30000-abc", wantErr: `last port "abc" is not a decimal number`},
		{name: "plus sign", in: "+30000-32767", wantErr: `first port "+30000" is not a decimal`},
		{name: "negative end", in: "30000--5", wantErr: `last port "-5" is not a decimal`},
		{name: "inner space", in: "30000 - 32767", wantErr: `first port "30000 " is not a decimal`},
		{name: "zero", in: "0-100", wantErr: "first port is 0"},
		{name: "too high", in: "30000-65536", wantErr: `last port "65536" is above 65535`},
		{name: "huge", in: "30000-99999999999999999999", wantErr: "is above 65535"},
		{name: "reversed", in: "32767-30000", wantErr: "ends (30000) before it starts (32767)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseRange(tt.in)
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Fatalf("ParseRange(%q) = %v, %v; want %v, nil", tt.in, got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("ParseRange(%q) = %v, nil; want error containing %q", tt.in, got, tt.wantErr)
			}
			if !errors.Is(err, ErrInvalidRange) {
				t.Errorf("ParseRange(%q) error %v does not wrap ErrInvalidRange", tt.in, err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseRange(%q) error = %q; want it to contain %q", tt.in, err, tt.wantErr)
			}
		})
	}
}

func TestBandOffset(t *testing.T) {
	tests := []struct {
		name        string
		r           string
		wantOffset  int
		wantStatic  string // "" when there are no bands
		wantDynamic string
	}{
		// The three worked examples of KEP-3668 (see BandOffset for the rounding).
		{name: "KEP example 1 default", r: "30000-32767", wantOffset: 86, wantStatic: "30000-30085", wantDynamic: "30086-32767"},
		{name: "KEP example 2 large", r: "20000-32767", wantOffset: 128, wantStatic: "20000-20127", wantDynamic: "20128-32767"},
		{name: "KEP example 3 small", r: "32567-32767", wantOffset: 16, wantStatic: "32567-32582", wantDynamic: "32583-32767"},
		{name: "size 1", r: "30000-30000", wantOffset: 0, wantDynamic: "30000-30000"},
		{name: "size 16 has no bands", r: "30000-30015", wantOffset: 0, wantDynamic: "30000-30015"},
		{name: "size 17 floor of 16", r: "30000-30016", wantOffset: 16, wantStatic: "30000-30015", wantDynamic: "30016-30016"},
		{name: "size 543 still 16", r: "30000-30542", wantOffset: 16, wantStatic: "30000-30015", wantDynamic: "30016-30542"},
		{name: "size 544 first step to 17", r: "30000-30543", wantOffset: 17, wantStatic: "30000-30016", wantDynamic: "30017-30543"},
		{name: "size 4096 reaches cap", r: "1-4096", wantOffset: 128, wantStatic: "1-128", wantDynamic: "129-4096"},
		{name: "size 4095 just below cap", r: "1-4095", wantOffset: 127, wantStatic: "1-127", wantDynamic: "128-4095"},
		{name: "whole port space capped", r: "1-65535", wantOffset: 128, wantStatic: "1-128", wantDynamic: "129-65535"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := MustParseRange(tt.r)
			if got := BandOffset(r.Size()); got != tt.wantOffset {
				t.Errorf("BandOffset(%d) = %d; want %d", r.Size(), got, tt.wantOffset)
			}
			st, dy := r.StaticBand(), r.DynamicBand()
			if tt.wantStatic == "" {
				if st.Size() != 0 {
					t.Errorf("StaticBand(%s) = %s; want empty", r, st)
				}
			} else if st.String() != tt.wantStatic {
				t.Errorf("StaticBand(%s) = %s; want %s", r, st, tt.wantStatic)
			}
			if dy.String() != tt.wantDynamic {
				t.Errorf("DynamicBand(%s) = %s; want %s", r, dy, tt.wantDynamic)
			}
			if st.Size()+dy.Size() != r.Size() {
				t.Errorf("bands of %s hold %d+%d ports; want %d", r, st.Size(), dy.Size(), r.Size())
			}
		})
	}
}

func TestRangeJSON(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Range
		wantErr bool
	}{
		{name: "valid", in: `"40100-40199"`, want: Range{40100, 40199}},
		{name: "reversed", in: `"40199-40100"`, wantErr: true},
		{name: "not a string", in: `{"first":1}`, wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var got Range
			err := json.Unmarshal([]byte(tt.in), &got)
			if (err != nil) != tt.wantErr {
				t.Fatalf("Unmarshal(%s) error = %v; want error %v", tt.in, err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if got != tt.want {
				t.Errorf("Unmarshal(%s) = %v; want %v", tt.in, got, tt.want)
			}
			out, err := json.Marshal(got)
			if err != nil || string(out) != tt.in {
				t.Errorf("Marshal(%v) = %s, %v; want %s", got, out, err, tt.in)
			}
		})
	}
}
