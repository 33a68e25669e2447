// Command dumpcost measures, in the real kernel, what reading an endpoint map back costs when its
// elements are split over several maps (bench/README.md, section B, "Splitting the endpoint
// maps"). For each shard count it fills a fresh namespace with the endpoint map's shape (address
// . protocol . port . slot -> address . port, 10 slots per frontend) split over that many maps,
// each read by its own pick chain, and a verdict map with one element per frontend going to its
// map's chain, as the ruleset builder lays them out. It reports the fill's kernel time and the
// read-back of the whole table (DumpPacked, on two sockets, as a restart reads it), wall and CPU.
// Needs root.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/nftproxy/nftproxy/bench/syncs"
	"github.com/nftproxy/nftproxy/bench/workload"
	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/test/netns"
)

func main() {
	frontends := flag.Int("frontends", 100000, "frontends (10 slots each)")
	shardList := flag.String("shards", "1,4,16,64", "shard counts to measure, comma separated")
	runs := flag.Int("runs", 3, "read-backs per shard count (same namespace)")
	services := flag.Int("services", 0, "instead: the benchmark workload of this many Services × 10 endpoints as the builder lays it out; each set's read-back alone")
	flag.Parse()
	if os.Geteuid() != 0 {
		fmt.Fprintln(os.Stderr, "dumpcost: needs root (creates network namespaces)")
		os.Exit(2)
	}
	if *services > 0 {
		if err := perSet(*services); err != nil {
			fmt.Fprintln(os.Stderr, "dumpcost:", err)
			os.Exit(1)
		}
		return
	}
	fmt.Printf("| shards | elements | fill: kernel | read-back wall (median of %d) | read-back CPU user | CPU sys |\n|---:|---:|---:|---:|---:|---:|\n", *runs)
	for _, s := range strings.Split(*shardList, ",") {
		k, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || k < 1 {
			fmt.Fprintf(os.Stderr, "dumpcost: -shards %q: want positive integers\n", *shardList)
			os.Exit(2)
		}
		if err := measure(*frontends, k, *runs); err != nil {
			fmt.Fprintln(os.Stderr, "dumpcost:", err)
			os.Exit(1)
		}
	}
}

const slots = 10

func measure(frontends, shards, runs int) error {
	ns, err := netns.Create("nftp-dumpcost")
	if err != nil {
		return err
	}
	defer ns.Close()
	k, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
	if err != nil {
		return err
	}
	defer k.Close()
	ctx := context.Background()
	t := nft.Table{Family: nft.IPv4, Name: "dumpcost"}
	tx := nft.NewTransaction(t)
	tx.Grow(frontends*(slots+1) + 4*shards)
	tx.Add(&nft.TableObj{})
	tx.Add(&nft.Set{Name: "svc", Key: []nft.Type{nft.TypeIPv4Addr, nft.TypeInetProto, nft.TypeInetService}, Data: []nft.Type{nft.TypeVerdict}})
	for s := 0; s < shards; s++ {
		m, c := fmt.Sprintf("endpoints-%d", s), fmt.Sprintf("pick-%d-%d", slots, s)
		tx.Add(&nft.Set{Name: m, Key: []nft.Type{nft.TypeIPv4Addr, nft.TypeInetProto, nft.TypeInetService, nft.TypeInteger},
			Data: []nft.Type{nft.TypeIPv4Addr, nft.TypeInetService}, NumgenKey: 1})
		tx.Add(&nft.Chain{Name: c})
		tx.Add(&nft.Rule{Chain: c, Exprs: []nft.Expr{nft.DNATNumgen{Modulus: slots, Map: m, WithPort: true, Key: nft.DNATNumgenKeyAddr}}})
	}
	base := netip.MustParseAddr("198.18.0.0").As4()
	addr := func(i int) netip.Addr {
		b := base
		b[1] += byte(i >> 16)
		b[2], b[3] = byte(i>>8), byte(i)
		return netip.AddrFrom4(b)
	}
	for i := 0; i < frontends; i++ {
		s := i % shards
		front := []nft.Value{nft.Addr(addr(i)), nft.Proto(unix.IPPROTO_TCP), nft.Port(80)}
		tx.Add(&nft.Element{Set: "svc", Key: front, Verdict: &nft.Verdict{Kind: nft.VerdictGoto, Chain: fmt.Sprintf("pick-%d-%d", slots, s)}})
		for j := 0; j < slots; j++ {
			key := append(append([]nft.Value(nil), front...), nft.Int(uint32(j)))
			ep := addr((i*slots + j) % (1 << 17))
			tx.Add(&nft.Element{Set: fmt.Sprintf("endpoints-%d", s), Key: key, Data: []nft.Value{nft.Addr(ep), nft.Port(8080)}})
		}
	}
	st, err := k.Apply(ctx, tx)
	if err != nil {
		return fmt.Errorf("fill %d shards: %w", shards, err)
	}
	tx = nil
	runtime.GC()
	var walls, users, syss []time.Duration
	for r := 0; r < runs; r++ {
		n := 0
		u0, s0 := cpu()
		start := time.Now()
		if _, err := k.DumpPacked(ctx, t, func(nft.Packed) { n++ }); err != nil {
			return fmt.Errorf("read back %d shards: %w", shards, err)
		}
		wall := time.Since(start)
		u1, s1 := cpu()
		if want := frontends * (slots + 1); n != want {
			return fmt.Errorf("read back %d shards: %d elements, want %d", shards, n, want)
		}
		walls, users, syss = append(walls, wall), append(users, u1-u0), append(syss, s1-s0)
		runtime.GC()
	}
	fmt.Printf("| %d | %d | %s | %s [%s–%s] | %s | %s |\n", shards, frontends*(slots+1), round(st.Duration),
		round(median(walls)), round(minOf(walls)), round(maxOf(walls)), round(median(users)), round(median(syss)))
	return nil
}

// perSet applies the builder's ruleset for the benchmark workload and reads each set back alone,
// on one socket: the kernel's share of a restart's read-back, set by set.
func perSet(services int) error {
	ns, err := netns.Create("nftp-dumpcost")
	if err != nil {
		return err
	}
	defer ns.Close()
	k, err := nft.NewKernel(nft.WithNetNS(ns.Fd()))
	if err != nil {
		return err
	}
	defer k.Close()
	ctx := context.Background()
	w := workload.Generate(workload.DefaultSpec(services, slots, 1))
	b, err := syncs.NewBuilder()
	if err != nil {
		return err
	}
	rs := b.Ruleset(w.Node, w.Services)
	tx := nft.NewTransaction(rs.Table)
	tx.Add(&nft.TableObj{})
	for i := range rs.Chains {
		tx.Add(&rs.Chains[i])
	}
	for i := range rs.Sets {
		tx.Add(&rs.Sets[i])
	}
	for i := range rs.Rules { // rules before elements: a new binding walks a map's elements
		tx.Add(&rs.Rules[i])
	}
	for _, s := range rs.Sets {
		for i := range rs.Elements[s.Name] {
			tx.Add(&rs.Elements[s.Name][i])
		}
	}
	st, err := k.Apply(ctx, tx)
	if err != nil {
		return fmt.Errorf("apply %d Services: %w", services, err)
	}
	type row struct {
		name      string
		n         int
		wall, sys time.Duration
	}
	var rows []row
	var total row
	for _, set := range rs.Sets {
		_, s0 := cpu()
		start := time.Now()
		els, err := k.DumpSetElements(ctx, rs.Table, set.Name)
		if err != nil {
			return fmt.Errorf("read back %s: %w", set.Name, err)
		}
		r := row{name: set.Name, n: len(els), wall: time.Since(start)}
		_, s1 := cpu()
		r.sys = s1 - s0
		rows = append(rows, r)
		total.n, total.wall, total.sys = total.n+r.n, total.wall+r.wall, total.sys+r.sys
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].sys > rows[j].sys })
	fmt.Printf("%d Services × %d endpoints: %d sets, %d elements, applied in %s (kernel); each set read back alone, one socket:\n\n", services, slots, len(rs.Sets), total.n, round(st.Duration))
	fmt.Printf("| set | elements | wall | CPU sys |\n|---|---:|---:|---:|\n")
	for i, r := range rows {
		if i == 8 {
			break
		}
		fmt.Printf("| %s | %d | %s | %s |\n", r.name, r.n, round(r.wall), round(r.sys))
	}
	fmt.Printf("| all %d sets | %d | %s | %s |\n", len(rows), total.n, round(total.wall), round(total.sys))
	return nil
}

func cpu() (user, sys time.Duration) {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	return time.Duration(ru.Utime.Nano()), time.Duration(ru.Stime.Nano())
}

func median(xs []time.Duration) time.Duration {
	s := append([]time.Duration(nil), xs...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}

func minOf(xs []time.Duration) time.Duration {
	m := xs[0]
	for _, x := range xs {
		m = min(m, x)
	}
	return m
}

func maxOf(xs []time.Duration) time.Duration {
	m := xs[0]
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

func round(d time.Duration) time.Duration { return d.Round(time.Millisecond) }
