package ruleset

import (
	"testing"

	"github.com/nftproxy/nftproxy/bench/workload"
	"github.com/nftproxy/nftproxy/nft"
)

// BenchmarkServiceFragments builds the fragment of every Service of the benchmarks' 10k × 10
// workload: what a full sync (or a restart) spends in the builder, and the garbage it makes.
// go test -run X -bench ServiceFragments -benchtime 3x ./proxy/ruleset/
func BenchmarkServiceFragments(b *testing.B) {
	bl, err := NewBuilder(Config{Family: nft.IPv4, MasqueradeMark: 0x4000, DropMark: 0x8000})
	if err != nil {
		b.Fatal(err)
	}
	w := workload.Generate(workload.DefaultSpec(10000, 10, 1))
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		for _, s := range w.Services {
			bl.Service(w.Node, s)
		}
	}
}
