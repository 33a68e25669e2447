package soak

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/nftproxy/nftproxy/test/netns"
)

// state is a table's content in a comparable form: one line per object (table, chain, set
// with its elements sorted, rule with its position in its chain), kernel handles removed,
// sorted. Two states are equal when the kernels hold the same ruleset, whatever order
// elements were added in.
type state []string

// ourTables are the tables the daemon owns.
var ourTables = [][2]string{{"ip", "nftproxy"}, {"ip6", "nftproxy"}}

// dumpState reads the given tables from ns with `nft -j`; a missing table contributes nothing.
func dumpState(ns *netns.NS, tables [][2]string) (state, error) {
	var st state
	for _, tb := range tables {
		out, err := ns.Run("nft", "-j", "list", "table", tb[0], tb[1])
		if err != nil {
			if strings.Contains(err.Error(), "No such file or directory") {
				continue
			}
			return nil, err
		}
		s, err := normalize([]byte(out))
		if err != nil {
			return nil, fmt.Errorf("table %s %s: %w", tb[0], tb[1], err)
		}
		st = append(st, s...)
	}
	sort.Strings(st)
	return st, nil
}

// normalize turns `nft -j` output into a state.
func normalize(js []byte) (state, error) {
	var doc struct {
		Nftables []map[string]map[string]any `json:"nftables"`
	}
	if err := json.Unmarshal(js, &doc); err != nil {
		return nil, err
	}
	var st state
	pos := map[string]int{}
	for _, obj := range doc.Nftables {
		for kind, body := range obj {
			if kind == "metainfo" {
				continue
			}
			delete(body, "handle")
			if elems, ok := body["elem"].([]any); ok {
				sort.Slice(elems, func(i, j int) bool { return jsonString(elems[i]) < jsonString(elems[j]) })
			}
			line := kind + " " + jsonString(body)
			if kind == "rule" {
				chain := fmt.Sprint(body["family"], " ", body["table"], " ", body["chain"])
				line = fmt.Sprintf("rule %s #%d %s", chain, pos[chain], jsonString(body))
				pos[chain]++
			}
			st = append(st, line)
		}
	}
	sort.Strings(st)
	return st, nil
}

func jsonString(v any) string {
	b, err := json.Marshal(v) // map keys come out sorted
	if err != nil {
		return fmt.Sprintf("%v", v)
	}
	return string(b)
}

// diff describes how got differs from want (at most max lines of each side), "" when equal.
func (got state) diff(want state, max int) string {
	w := map[string]int{}
	for _, l := range want {
		w[l]++
	}
	var extra []string
	for _, l := range got {
		if w[l] > 0 {
			w[l]--
			continue
		}
		extra = append(extra, l)
	}
	var missing []string
	for _, l := range want {
		if w[l] > 0 {
			w[l]--
			missing = append(missing, l)
		}
	}
	if len(extra)+len(missing) == 0 {
		return ""
	}
	cut := func(ls []string) string {
		if len(ls) > max {
			ls = append(ls[:max:max], fmt.Sprintf("... and %d more", len(ls)-max))
		}
		for i, l := range ls {
			if len(l) > 400 {
				ls[i] = l[:400] + "..."
			}
		}
		return strings.Join(ls, "\n  ")
	}
	return fmt.Sprintf("%d objects missing, %d unexpected\nmissing:\n  %s\nunexpected:\n  %s",
		len(missing), len(extra), cut(missing), cut(extra))
}

// desiredState is what the daemon should hold for the manifests in e.dir: `nftproxy render`
// of them, loaded with `nft -f` into a fresh namespace and read back the same way.
func (e *env) desiredState() state {
	e.t.Helper()
	argv := append([]string{daemonBinary, "render"}, e.flags()...)
	out, err := e.lab.Node.Run(argv...)
	if err != nil {
		e.t.Fatalf("render: %v", err)
	}
	ns := netns.New(e.t, "nftp-soak-want")
	if _, err := ns.RunStdin(out, "nft", "-f", "-"); err != nil {
		e.t.Fatalf("load the rendered ruleset into a fresh namespace: %v", err)
	}
	st, err := dumpState(ns, ourTables)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

// nodeState is what the node's kernel holds in the daemon's tables now.
func (e *env) nodeState() state {
	e.t.Helper()
	st, err := dumpState(e.lab.Node, ourTables)
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

// waitState waits until the node holds want; it returns how long that took, or the last diff
// after limit.
func (e *env) waitState(want state, limit time.Duration) (time.Duration, string) {
	start := time.Now()
	var d string
	err := e.poll(limit, func() (bool, error) {
		got, err := dumpState(e.lab.Node, ourTables)
		if err != nil {
			return false, err
		}
		d = got.diff(want, 10)
		return d == "", nil
	})
	if err != nil {
		if d == "" {
			d = err.Error()
		}
		return time.Since(start), d
	}
	return time.Since(start), ""
}
