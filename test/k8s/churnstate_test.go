package k8s

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/ruleset"
	"github.com/nftproxy/nftproxy/test/lab"
)

// endpointState maps a Service port's name as the ruleset comments it ("ns/name/tcp/http") to
// the IPv4 endpoints its ClusterIP sends new connections to, sorted.
type endpointState map[string][]string

// desiredChurn is where every churned Service's last accepted version and the canary (on
// pod canaryPod) must send connections.
func (e *env) desiredChurn(ws []*writer, canaryPod int) endpointState {
	want := endpointState{testNS + "/canary/tcp/http": {lab.PodIPv4(canaryPod).String()}}
	for _, w := range ws {
		for _, i := range w.mine {
			var eps []string
			for _, a := range churnPods(i, w.version[i]) {
				eps = append(eps, a.String())
			}
			slices.Sort(eps)
			want[churnNS+"/"+churnName(i)+"/tcp/http"] = eps
		}
	}
	return want
}

// kernelEndpoints reads the node's IPv4 table over netlink: for each ClusterIP dispatch element
// (commented with its port's name), the endpoints in its slots of the shared endpoint map.
func (e *env) kernelEndpoints() (endpointState, error) {
	k, err := nft.NewKernel(nft.WithNetNS(e.lab.Node.Fd()))
	if err != nil {
		return nil, err
	}
	defer k.Close()
	ctx, cancel := context.WithTimeout(e.ctx, time.Minute)
	defer cancel()
	rs, err := k.Dump(ctx, nft.Table{Family: nft.IPv4, Name: ruleset.DefaultTable})
	if err != nil {
		return nil, err
	}
	slots := map[string][]string{} // by the dispatch key
	for m, els := range rs.Elements {
		if !ruleset.IsEndpointMap(m, ruleset.MapEndpoints) {
			continue
		}
		for _, el := range els {
			if len(el.Key) < 2 || len(el.Data) == 0 {
				continue
			}
			k := fmt.Sprint(el.Key[:len(el.Key)-1])
			slots[k] = append(slots[k], el.Data[0].Addr.String())
		}
	}
	got := endpointState{}
	for _, el := range rs.Elements[ruleset.MapServiceIPs] {
		if el.Verdict == nil || !el.Key[0].Addr.Is4() {
			continue
		}
		eps := slices.Clone(slots[fmt.Sprint(el.Key)])
		slices.Sort(eps)
		got[el.Comment] = eps
	}
	return got, nil
}

// diff says how got differs from want on the churned Services and the canary ("" when equal):
// a Service missing, one with other endpoints, or a churned one nobody wrote.
func (got endpointState) diff(want endpointState) string {
	var out []string
	for k, w := range want {
		if g, ok := got[k]; !ok {
			out = append(out, k+": not programmed")
		} else if !slices.Equal(g, w) {
			out = append(out, fmt.Sprintf("%s: endpoints %v, want %v", k, g, w))
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok && strings.HasPrefix(k, churnNS+"/") {
			out = append(out, k+": programmed, never written")
		}
	}
	slices.Sort(out)
	if len(out) > 10 {
		out = append(out[:10], fmt.Sprintf("... and %d more", len(out)-10))
	}
	return strings.Join(out, "; ")
}

// waitKernel polls the node's kernel until it holds want exactly and returns how long that
// took; it fails the test with the last difference after limit or when the daemon exits.
func (e *env) waitKernel(want endpointState, limit time.Duration) time.Duration {
	e.t.Helper()
	start := time.Now()
	var last string
	for {
		got, err := e.kernelEndpoints()
		if err != nil {
			last = err.Error()
		} else if last = got.diff(want); last == "" {
			return time.Since(start)
		}
		select {
		case <-e.daemon.Done():
			e.t.Fatalf("the daemon exited (%v) before the kernel held the desired state: %s", e.daemon.Err(), last)
		default:
		}
		if time.Since(start) > limit {
			e.t.Fatalf("the kernel does not hold the desired state after %v: %s", limit, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
