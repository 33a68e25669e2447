package nft

import (
	"encoding/hex"
	"strings"
	"testing"
)

// Bytes captured from nft 1.0.6: `nft --debug=mnl add map <fam> t m '{ typeof ...; }'`.
func TestNumgenMapUserdataMatchesNft(t *testing.T) {
	h := func(s string) string { return strings.ReplaceAll(s, " ", "") }
	cases := []struct {
		name string
		fam  Family
		data []Type
		want string
	}{
		{"ip daddr . th dport", IPv4, []Type{TypeIPv4Addr, TypeInetService},
			h("00 04 01 00 00 00 01 04 00 00 00 00 03 1a 00 04 17 00 00 00 01 12 00 04 01 00 00 00 01 04 02 00 00 00 02 04 00 00 00 00 04 34 00 04 0d 00 00 00 01 2c 00 14 00 04 07 00 00 00 01 0c 00 04 0c 00 00 00 01 04 0c 00 00 00 01 14 00 04 07 00 00 00 01 0c 00 04 0b 00 00 00 01 04 02 00 00 00 06 04 00 00 00 00")},
		{"ip daddr", IPv4, []Type{TypeIPv4Addr},
			h("00 04 01 00 00 00 01 04 02 00 00 00 03 1a 00 04 17 00 00 00 01 12 00 04 01 00 00 00 01 04 02 00 00 00 02 04 00 00 00 00 04 14 00 04 07 00 00 00 01 0c 00 04 0c 00 00 00 01 04 0c 00 00 00 06 04 00 00 00 00")},
		{"ip6 daddr . th dport", IPv6, []Type{TypeIPv6Addr, TypeInetService},
			h("00 04 01 00 00 00 01 04 00 00 00 00 03 1a 00 04 17 00 00 00 01 12 00 04 01 00 00 00 01 04 02 00 00 00 02 04 00 00 00 00 04 34 00 04 0d 00 00 00 01 2c 00 14 00 04 07 00 00 00 01 0c 00 04 0d 00 00 00 01 04 09 00 00 00 01 14 00 04 07 00 00 00 01 0c 00 04 0b 00 00 00 01 04 02 00 00 00 06 04 00 00 00 00")},
		{"ip6 daddr", IPv6, []Type{TypeIPv6Addr},
			h("00 04 01 00 00 00 01 04 02 00 00 00 03 1a 00 04 17 00 00 00 01 12 00 04 01 00 00 00 01 04 02 00 00 00 02 04 00 00 00 00 04 14 00 04 07 00 00 00 01 0c 00 04 0d 00 00 00 01 04 09 00 00 00 06 04 00 00 00 00")},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := &Set{Name: "m", Key: []Type{TypeInteger}, Data: c.data, NumgenKey: 2}
			b, err := numgenMapUserdata(c.fam, s)
			if err != nil {
				t.Fatal(err)
			}
			if got := hex.EncodeToString(b); got != c.want {
				t.Errorf("userdata\n got %s\nwant %s", got, c.want)
			}
			if got := numgenModFromUserdata(b); got != 2 {
				t.Errorf("modulus read back = %d, want 2", got)
			}
		})
	}
	if _, err := numgenMapUserdata(IPv4, &Set{Name: "m", Key: []Type{TypeIPv4Addr}, Data: []Type{TypeIPv4Addr}, NumgenKey: 2}); err == nil {
		t.Error("a non-integer key was accepted")
	}
}
