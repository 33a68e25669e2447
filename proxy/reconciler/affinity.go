package reconciler

import (
	"context"
	"errors"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
)

// The packet path fills dynamic maps with "update @m { key : data }" (ClientIP affinity: client
// . frontend -> endpoint). The reconciler never diffs those elements, but an entry whose data is
// an endpoint that no rule records any more would send its client to a removed endpoint until it
// expires. So the reconciler counts, per dynamic map, the data its desired rules record, and
// after a Commit in which some data lost its last recording rule, it reads that map back and
// deletes the entries holding such data (after a full Commit: every entry whose data no desired
// rule records). The update that only refreshes an entry carries an all-zero constant the kernel
// never stores on an existing element; an entry holding it (created in the instant its old one
// expired) is deleted too.

// recordedKey is one data value of one map.
type recordedKey struct {
	set  string
	data [2]nft.Value
}

// recorded counts the desired rules recording each data value, and remembers the values whose
// count fell to zero since the last prune.
type recorded struct {
	n    map[recordedKey]int
	lost map[recordedKey]bool
}

func newRecorded() recorded {
	return recorded{n: map[recordedKey]int{}, lost: map[recordedKey]bool{}}
}

// dataKey is the key of data in set, and false for data that is no endpoint (all zero).
func dataKey(set string, data []nft.Value) (recordedKey, bool) {
	k := recordedKey{set: set}
	if len(data) == 0 || len(data) > len(k.data) {
		return k, false
	}
	zero := true
	for i, v := range data {
		k.data[i] = v
		if (v.Addr.IsValid() && !v.Addr.IsUnspecified()) || v.Num != 0 {
			zero = false
		}
	}
	return k, !zero
}

// chain adds (delta 1) or removes (-1) the recordings of c's rules.
func (rc *recorded) chain(c *fragment.ChainDef, delta int) {
	if c == nil {
		return
	}
	for _, r := range c.Rules {
		for _, e := range r.Exprs {
			u, ok := e.(nft.SetUpdate)
			if !ok {
				continue
			}
			k, ok := dataKey(u.Set, u.Data)
			if !ok {
				continue
			}
			if rc.n[k] += delta; rc.n[k] > 0 {
				delete(rc.lost, k)
				continue
			}
			delete(rc.n, k)
			if delta < 0 {
				rc.lost[k] = true
			}
		}
	}
}

// declared adds (delta 1) or removes (-1) the data a fragment declares it may record.
func (rc *recorded) declared(ks []recordedKey, delta int) {
	for _, k := range ks {
		if rc.n[k] += delta; rc.n[k] > 0 {
			delete(rc.lost, k)
			continue
		}
		delete(rc.n, k)
		if delta < 0 {
			rc.lost[k] = true
		}
	}
}

// recordedKeys are the keys of a fragment's declared data, all-zero data left out.
func recordedKeys(rs []fragment.Recorded) []recordedKey {
	var out []recordedKey
	for _, r := range rs {
		if k, ok := dataKey(r.Set, r.Data); ok {
			out = append(out, k)
		}
	}
	return out
}

// pruneAffinity deletes, in each table, the dynamic map entries whose data is stale: lost since
// the last prune, or with full, recorded by no desired rule. It costs a read-back of those maps
// only, and only when something was lost (or on a full Commit with recording rules). It returns
// how many entries it deleted and the families of the tables where it failed. Entries that
// expire between the read and the delete make the kernel refuse their delete; they are left out
// and the rest sent again (bounded).
func (r *Reconciler) pruneAffinity(ctx context.Context, full bool) (int, []nft.Family, error) {
	d, ok := r.kernel.(nft.SetElementsDumper)
	if !ok {
		return 0, nil, nil
	}
	pruned := 0
	var errs []error
	var failed []nft.Family
	for _, tb := range r.tables {
		tableErrs := len(errs)
		sets := map[string]bool{}
		for k := range tb.rec.lost {
			sets[k.set] = true
		}
		if full {
			for name := range tb.desired.sets {
				if tb.desired.isDynamic(name) && tb.desired.sets[name].IsMap() {
					sets[name] = true
				}
			}
		}
		for set := range sets {
			n, err := r.pruneSet(ctx, d, tb, set, full)
			pruned += n
			if err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) == tableErrs {
			tb.rec.lost = map[recordedKey]bool{}
		} else {
			failed = append(failed, tb.t.Family)
		}
	}
	return pruned, failed, errors.Join(errs...)
}

// pruneAttempts bounds the retries of a prune whose deletes the kernel refused.
const pruneAttempts = 4

func (r *Reconciler) pruneSet(ctx context.Context, d nft.SetElementsDumper, tb *table, set string, full bool) (int, error) {
	els, err := d.DumpSetElements(ctx, tb.t, set)
	if nft.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	// A dump that meets the kernel resizing the map's hash table may list an element twice
	// (and miss others: a later prune meets them): delete each key once, or the kernel
	// refuses the second delete and with it the batch.
	var stale []nft.Element
	seen := map[string]bool{}
	for _, e := range els {
		k, endpoint := dataKey(set, e.Data)
		if endpoint && !tb.rec.lost[k] && (!full || tb.rec.n[k] > 0) {
			continue
		}
		el := nft.Element{Set: set, Key: e.Key}
		p := nft.Pack(&el)
		if id := p.ID(); !seen[id] {
			seen[id] = true
			stale = append(stale, el)
		}
	}
	for attempt := 0; len(stale) > 0; attempt++ {
		tx := nft.NewTransaction(tb.t)
		for i := range stale {
			tx.Delete(&stale[i])
		}
		_, err := r.kernel.Apply(ctx, tx)
		if err == nil {
			return len(stale), nil
		}
		var oe *nft.OpError
		if attempt+1 == pruneAttempts || !errors.As(err, &oe) || oe.Index < 0 || oe.Index >= len(stale) {
			return 0, err
		}
		refused := map[int]bool{oe.Index: true}
		for _, o := range oe.Also {
			refused[o.Index] = true
		}
		kept := stale[:0]
		for i, e := range stale {
			if !refused[i] {
				kept = append(kept, e)
			}
		}
		stale = kept
	}
	return 0, nil
}
