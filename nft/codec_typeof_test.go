package nft

import (
	"encoding/binary"
	"encoding/hex"
	"testing"
)

// TestCodecSetUdataMatchesNft compares our set userdata with the bytes nft 1.0.6 sent for the
// same declaration (NFTA_SET_USERDATA of `nft --debug=mnl -f`, captured on a little-endian host),
// and checks that Dump's decoder gets the modulus back from them.
func TestCodecSetUdataMatchesNft(t *testing.T) {
	if binary.NativeEndian.Uint16([]byte{1, 0}) != 1 {
		t.Skip("the captured bytes hold host-order integers of a little-endian host")
	}
	a4, a6 := TypeIPv4Addr, TypeIPv6Addr
	tests := []struct {
		decl string
		set  Set
		nft  string
	}{
		{"ip: typeof ip daddr . meta l4proto . th dport . numgen random mod 1 : ip daddr . th dport",
			Set{Key: []Type{a4, TypeInetProto, TypeInetService, TypeInteger}, Data: []Type{a4, TypeInetService}, NumgenKey: 1},
			"000400000000010400000000036000040d00000001580014000407000000010c00040c00000001040c000000010e00040900000001060004100000000214000407000000010c00040b000000010402000000031a0004170000000112000401000000010401000000020400000000043400040d000000012c0014000407000000010c00040c00000001040c0000000114000407000000010c00040b000000010402000000060400000000"},
		{"ip: typeof meta l4proto . th dport . numgen random mod 3 : ip daddr",
			Set{Key: []Type{TypeInetProto, TypeInetService, TypeInteger}, Data: []Type{a4}, NumgenKey: 3},
			"000400000000010402000000034a00040d0000000142000e00040900000001060004100000000114000407000000010c00040b000000010402000000021a00041700000001120004010000000104030000000204000000000414000407000000010c00040c00000001040c000000060400000000"},
		{`ip6: typeof ip6 daddr . meta l4proto . th dport . numgen random mod 1 : ip6 daddr . th dport; comment "c"`,
			Set{Key: []Type{a6, TypeInetProto, TypeInetService, TypeInteger}, Data: []Type{a6, TypeInetService}, NumgenKey: 1, Comment: "c"},
			"000400000000010400000000036000040d00000001580014000407000000010c00040d000000010409000000010e00040900000001060004100000000214000407000000010c00040b000000010402000000031a0004170000000112000401000000010401000000020400000000043400040d000000012c0014000407000000010c00040d0000000104090000000114000407000000010c00040b00000001040200000006040000000007026300"},
		{"ip: typeof numgen random mod 2 : ip daddr . th dport",
			Set{Key: []Type{TypeInteger}, Data: []Type{a4, TypeInetService}, NumgenKey: 2},
			"000401000000010400000000031a0004170000000112000401000000010402000000020400000000043400040d000000012c0014000407000000010c00040c00000001040c0000000114000407000000010c00040b000000010402000000060400000000"},
		{"ip: typeof numgen random mod 2 : verdict",
			Set{Key: []Type{TypeInteger}, Data: []Type{TypeVerdict}, NumgenKey: 2},
			"000401000000010400000000031a000417000000011200040100000001040200000002040000000004080004010000000100060400000000"},
	}
	for _, tt := range tests {
		t.Run(tt.decl, func(t *testing.T) {
			if got := hex.EncodeToString(codecSetUdata(&tt.set, tt.set.NumgenKey)); got != tt.nft {
				t.Errorf("userdata:\n got %s\nwant %s", got, tt.nft)
			}
			b, _ := hex.DecodeString(tt.nft)
			if got := decodeNumgenTypeof(decodeUdata(b)[typeofUdataKey]); got != tt.set.NumgenKey {
				t.Errorf("decoded NumgenKey %d, want %d", got, tt.set.NumgenKey)
			}
		})
	}
}
