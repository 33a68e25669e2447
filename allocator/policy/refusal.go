package policy

import (
	"errors"
	"fmt"

	"github.com/nftproxy/nftproxy/allocator"
	"github.com/nftproxy/nftproxy/proxy/annotation"
)

// Reasons a node-port block is refused: stable labels, the cluster controller's Event reasons
// (alerts select on them) and the start of manifest mode's NodePortNotAssigned message.
const (
	// ReasonConflict: the block overlaps one an older (or already holding) Service has.
	ReasonConflict = "NodePortBlockConflict"
	// ReasonOutOfRange: the Service's range is not inside the block range.
	ReasonOutOfRange = "NodePortBlockOutOfRange"
	// ReasonShifted: a node-port-ranges entry is not the port range itself.
	ReasonShifted = "NodePortBlockShifted"
	// ReasonInvalid: the node-port-ranges annotation does not parse.
	ReasonInvalid = "NodePortRangesInvalid"
	// ReasonRefused: any other refusal (no block range configured, an allocator error).
	ReasonRefused = "NodePortBlockRefused"
)

// ErrShiftedBlock is wrapped by the refusal of a node-port-ranges entry that is not the port
// range itself.
var ErrShiftedBlock = errors.New("shifted node-port block")

// ErrNoBlockRange is wrapped by the refusal of a block while no block range is configured.
var ErrNoBlockRange = errors.New("no node-port block range configured")

// Refusal is one node-port block a Service does not get: a stable Reason, the Service that
// holds the contested ports when it is another one (an Event's related object), and a message
// that says what to do. It unwraps to the cause (the allocator's error or one of this
// package's sentinels), so callers branch with errors.Is.
type Refusal struct {
	Reason string
	// Holder is the "namespace/name" of the Service holding the ports; empty when none or when
	// it is the refused Service itself.
	Holder string
	msg    string
	cause  error
}

// Error is the message, the same in the controller's Event and in manifest mode's log.
func (r *Refusal) Error() string { return r.msg }

// Unwrap returns the cause.
func (r *Refusal) Unwrap() error { return r.cause }

// Shifted refuses a node-port-ranges entry that is not the ranged port's own range. Where the
// Service may be given a block, it gets its identity block instead; elsewhere the entry is
// dropped.
func Shifted(own, entry annotation.PortRange) *Refusal {
	return &Refusal{Reason: ReasonShifted, cause: ErrShiftedBlock, msg: fmt.Sprintf(
		"annotation %s entry %q refused (%v): a block must be the port range itself (node port p reaches port p), "+
			"because a shifted mapping (node port N+i to port p+i) cannot be programmed faithfully with nftables "+
			"(allocator/README.md); the entry is replaced by %s=%s where a block may be assigned, removed otherwise",
		annotation.NodePortRangesKey, entry.String(), ErrShiftedBlock, own.Name, Block(own))}
}

// Invalid reports a node-port-ranges annotation that does not parse; it is left as written.
func Invalid(err error) *Refusal {
	return &Refusal{Reason: ReasonInvalid, cause: err, msg: fmt.Sprintf("annotation %s does not parse: %v; fix or remove it "+
		"(blocks this Service held are kept, nothing new is assigned until then)", annotation.NodePortRangesKey, err)}
}

// RefuseBlock words the refusal of block b for ranged port of Service key ("namespace/name"),
// given the allocator's (or ErrNoBlockRange) error err and the configured block range.
func RefuseBlock(key, port string, b, blockRange allocator.Range, err error) *Refusal {
	var ae *allocator.AllocatedError
	switch {
	case errors.As(err, &ae):
		holder := HolderOf(ae.Owner)
		held := fmt.Sprintf("port %d", ae.Port)
		if ae.Block != nil {
			held = "block " + ae.Block.String()
		}
		if holder == key {
			return &Refusal{Reason: ReasonConflict, cause: err, msg: fmt.Sprintf("node-port block %s of port %q overlaps %s "+
				"of this Service's own port %q; ranges of one Service must not overlap", b, port, held, ae.Owner[len(key)+1:])}
		}
		return &Refusal{Reason: ReasonConflict, Holder: holder, cause: err, msg: fmt.Sprintf("node-port block %s of port %q "+
			"overlaps %s, held by Service %s (the older, or the one that held it first, keeps it); port %q gets no node "+
			"ports until that block is released, then it is assigned; or move this port range", b, port, held, holder, port)}
	case errors.Is(err, allocator.ErrOutOfRange):
		return &Refusal{Reason: ReasonOutOfRange, cause: err, msg: fmt.Sprintf("node-port block %s of port %q is outside "+
			"the block range %s (--range-node-port-range): a block is the port range itself and must lie inside the block "+
			"range, never in the node-port range; move the port range or widen the block range", b, port, blockRange)}
	case errors.Is(err, ErrNoBlockRange):
		return &Refusal{Reason: ReasonRefused, cause: err, msg: fmt.Sprintf("node-port block %s of port %q refused: %v; "+
			"set --range-node-port-range to a range outside the node-port range", b, port, err)}
	default:
		return &Refusal{Reason: ReasonRefused, cause: err, msg: fmt.Sprintf("node-port block %s of port %q refused: %v", b, port, err)}
	}
}
