package allocator

import (
	"errors"
	"fmt"
)

// Sentinel errors: every error the allocator returns wraps exactly one of these, so callers branch
// with errors.Is and never match message text. The typed errors below carry the details (which
// port, which owner) for errors.As.
var (
	// ErrInvalidRange: a range is malformed (parse error, ends reversed, past 65535).
	ErrInvalidRange = errors.New("invalid port range")
	// ErrOutOfRange: a requested port or block is not inside the allocator's range.
	ErrOutOfRange = errors.New("port outside the allocator's range")
	// ErrAllocated: a requested port is held by someone else (see *AllocatedError for who).
	ErrAllocated = errors.New("port already allocated")
	// ErrFull: no free port is left.
	ErrFull = errors.New("port range full")
	// ErrInvalidWidth: a block width is below 1 or wider than the whole range.
	ErrInvalidWidth = errors.New("invalid block width")
	// ErrInvalidOwner: an owner string is empty; every allocation must say whom it belongs to so
	// conflicts can name it.
	ErrInvalidOwner = errors.New("invalid owner")
	// ErrNotAllocated: a release names a port or block that is not held in that shape (a free
	// port, a single port that is part of a block, or a block with different ends).
	ErrNotAllocated = errors.New("not allocated")
)

// OutOfRangeError says which port or block fell outside which range.
type OutOfRangeError struct {
	Request Range // a single port has First == Last
	Range   Range // the allocator's range
}

func (e *OutOfRangeError) Error() string {
	what := fmt.Sprintf("port %d", e.Request.First)
	if e.Request.Size() > 1 {
		what = "block " + e.Request.String()
	}
	return fmt.Sprintf("%s is outside the allocator's range %s; pick a port inside it or widen the configured range",
		what, e.Range)
}

// Is makes errors.Is(err, ErrOutOfRange) true.
func (e *OutOfRangeError) Is(target error) bool { return target == ErrOutOfRange }

// AllocatedError says which port is taken and by whom, so the message on a rejected Service
// points at the Service that holds the port.
type AllocatedError struct {
	Port  int
	Owner string // the current holder
	Block *Range // the holder's block, when the port belongs to one
}

func (e *AllocatedError) Error() string {
	if e.Block != nil {
		return fmt.Sprintf("port %d is already allocated to %s (block %s); choose another port or release it first",
			e.Port, e.Owner, e.Block)
	}
	return fmt.Sprintf("port %d is already allocated to %s; choose another port or release it first", e.Port, e.Owner)
}

// Is makes errors.Is(err, ErrAllocated) true.
func (e *AllocatedError) Is(target error) bool { return target == ErrAllocated }

// ConflictError is a Restore failure: two claims in a snapshot want the same port. Both owners
// are named because either may be the one to fix.
type ConflictError struct {
	Port   int
	Owner  string // the claim seen first
	Other  string // the claim that collided with it
	Claims [2]Range
}

func (e *ConflictError) Error() string {
	return fmt.Sprintf("port %d is claimed by both %s (%s) and %s (%s); remove or change one of the two claims",
		e.Port, e.Owner, describe(e.Claims[0]), e.Other, describe(e.Claims[1]))
}

// Is makes errors.Is(err, ErrAllocated) true: a conflict is a double allocation.
func (e *ConflictError) Is(target error) bool { return target == ErrAllocated }

func describe(r Range) string {
	if r.Size() == 1 {
		return fmt.Sprintf("port %d", r.First)
	}
	return "block " + r.String()
}

// FullError says that no port is left in the range, and which range.
type FullError struct {
	Range Range // the allocator's range
}

func (e *FullError) Error() string {
	return fmt.Sprintf("no free port left in %s; release unused node ports or widen the range", e.Range)
}

// Is makes errors.Is(err, ErrFull) true.
func (e *FullError) Is(target error) bool { return target == ErrFull }
