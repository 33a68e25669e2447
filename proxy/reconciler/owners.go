package reconciler

import (
	"errors"
	"slices"

	"github.com/nftproxy/nftproxy/nft"
	"github.com/nftproxy/nftproxy/proxy/fragment"
)

// Owner names who hands a fragment to Set: a Service, by namespace and name, or the base layout
// (the zero Owner). A type rather than a "namespace/name" string, so that nobody parses it back.
type Owner struct {
	Namespace, Name string
}

// IsBase reports whether o is the base layout's owner (the zero Owner).
func (o Owner) IsBase() bool { return o == Owner{} }

// String is "namespace/name" ("" for the base layout), for logs and the order of Owners.
func (o Owner) String() string {
	if o.IsBase() {
		return ""
	}
	return o.Namespace + "/" + o.Name
}

// RefusedError is a Commit whose transaction the kernel refused, naming the op it refused (the
// kernel's extended ack, or an op the encoder could not send). The transaction was aborted as a
// whole: the kernel is unchanged, so the next Commit may stay partial. Owner names the owner of
// that op, if one owns it: the caller may set that owner's fragment empty (reject it) and Commit
// again.
type RefusedError struct {
	// Owner is the owner (as given to Set) whose fragment holds the refused op's object; Owned
	// is false when no owner does (the table itself, deleting an object nobody wants).
	Owner Owner
	Owned bool
	// Refusals lists, per owner, the first of its ops the kernel refused in the batch (Owner's
	// first, when owned): the kernel reports them all (nft.OpError.Also).
	Refusals []Refusal
	err      error
}

// Refusal is one owner's refused op.
type Refusal struct {
	Owner Owner
	Err   *nft.OpError
}

func (e *RefusedError) Error() string { return e.err.Error() }

// Unwrap returns the kernel's error (an *nft.OpError inside).
func (e *RefusedError) Unwrap() error { return e.err }

// Refused reports whether err is a Commit error that names the refused op: the kernel's state
// is known (unchanged), unlike after a failure of unknown extent.
func Refused(err error) bool {
	var re *RefusedError
	return errors.As(err, &re)
}

// Refusals returns, per owner, the op the kernel refused, if err is a Commit error whose first
// refused op has an owner (see RefusedOwner).
func Refusals(err error) []Refusal {
	var re *RefusedError
	if errors.As(err, &re) && re.Owned {
		return re.Refusals
	}
	return nil
}

// RefusedOwner returns the owner of the op the kernel refused, if err is a Commit error that
// names one. A refusal of an op no owner wants names none: that is a failure of the sync as a
// whole.
func RefusedOwner(err error) (Owner, bool) {
	var re *RefusedError
	if errors.As(err, &re) && re.Owned {
		return re.Owner, true
	}
	return Owner{}, false
}

// refusedError builds the error of a transaction the kernel refused with oe.
func (r *Reconciler) refusedError(tx *nft.Transaction, oe *nft.OpError, err error) *RefusedError {
	re := &RefusedError{err: err}
	refused := []*nft.OpError{oe}
	for _, e := range oe.Also {
		if e.Index >= 0 && e.Index < tx.Len() {
			refused = append(refused, e)
		}
	}
	ops := make([]nft.Op, len(refused))
	for i, e := range refused {
		ops[i] = tx.Op(e.Index)
	}
	owners, owned := r.ownersOf(ops)
	re.Owner, re.Owned = owners[0], owned[0]
	seen := map[Owner]bool{}
	for i, e := range refused {
		if owned[i] && !seen[owners[i]] {
			seen[owners[i]] = true
			re.Refusals = append(re.Refusals, Refusal{Owner: owners[i], Err: e})
		}
	}
	return re
}

// ownersOf names, for each op, the owner of the object it acts on: the owner of the chain (for
// a rule, its chain), of the set, or of the element; owned is false where none owns it. Chains
// and sets are looked up by name. Elements carry no owner (it would cost every element of the
// index 32 bytes): an element the desired state holds is traced to the first owner, in Owners
// order, whose record lists it — the same owner every time, and the only one when a single
// owner wants it. That is one pass over the records for all of ops, on this failure path alone.
func (r *Reconciler) ownersOf(ops []nft.Op) (owners []Owner, owned []bool) {
	owners, owned = make([]Owner, len(ops)), make([]bool, len(ops))
	elems := map[*table]map[string][]int{}         // element ID → the ops acting on it
	wanted := func(tb *table, id string, op int) { // an element op, traced if the element is wanted
		if _, ok := tb.desired.elems.get(id); !ok {
			return
		}
		if elems[tb] == nil {
			elems[tb] = map[string][]int{}
		}
		elems[tb][id] = append(elems[tb][id], op)
	}
	for i, op := range ops {
		var tb *table
		for _, t := range r.tables {
			if t.t == op.Table {
				tb = t
			}
		}
		if tb == nil {
			continue
		}
		switch o := op.Object.(type) {
		case *nft.Chain:
			owners[i], owned[i] = ownerIn(tb.chainOwner, o.Name)
		case *nft.Rule:
			if op.Verb == nft.VerbAdd {
				owners[i], owned[i] = ownerIn(tb.chainOwner, o.Chain)
			}
		case *nft.Set:
			owners[i], owned[i] = ownerIn(tb.setOwner, o.Name)
		case *nft.Packed:
			wanted(tb, o.ID(), i)
		case *nft.Element:
			wanted(tb, fragment.ElementID(o), i)
		}
	}
	for tb, ids := range elems {
		for _, owner := range r.Owners(tb.t) { // sorted: the same owner every time
			for _, e := range tb.owners[owner].elems {
				for _, i := range ids[e.ID()] {
					owners[i], owned[i] = owner, true
				}
				delete(ids, e.ID())
			}
			if len(ids) == 0 {
				break
			}
		}
	}
	return owners, owned
}

func ownerIn(m map[string]Owner, name string) (Owner, bool) {
	owner, ok := m[name]
	return owner, ok
}

// anotherChainOwner names an owner other than except that declares chain (the shared chains of
// the layout), for tracing a refusal once except no longer declares it. It searches the
// fragments: only when the first declarer of a shared chain goes away.
func (tb *table) anotherChainOwner(chain string, except Owner) Owner {
	var best Owner
	for o, rec := range tb.owners {
		if o != except && rec.declares(chain) && (best.IsBase() || o.String() < best.String()) {
			best = o
		}
	}
	return best
}

// ownerRecord is what an owner's last fragment put in its table, by name: the objects
// themselves live once, in the desired index (a fragment kept whole was a third copy of every
// element).
type ownerRecord struct {
	chains, sets []string
	// elems are the entries of the owner's elements, as the desired index held them when the
	// owner was set: a pointer (8 bytes) rather than the element's ID (a 16-byte string header
	// per element). Only the entry's id is read: the index's current entry for that ID may be
	// a newer one (replace), which another owner set since.
	elems []*elemEntry
	// recorded is the data the owner's fragment declared it may record (Fragment.Recorded).
	recorded []recordedKey
}

// declares reports whether the owner's fragment declares chain.
func (o *ownerRecord) declares(chain string) bool { return slices.Contains(o.chains, chain) }

// HeldCost is the Cost of the fragment owner last set in table t (0 if none): what removing
// or replacing it may ask of the kernel. A chain another owner also declares counts whole.
func (r *Reconciler) HeldCost(t nft.Table, owner Owner) int {
	tb := r.table(t)
	rec := tb.owners[owner]
	if rec == nil {
		return 0
	}
	n := len(rec.chains) + len(rec.elems) + fragment.SetCost*len(rec.sets)
	for _, c := range rec.chains {
		if dc, ok := tb.desired.chains[c]; ok {
			n += len(dc.Rules)
		}
	}
	return n
}
