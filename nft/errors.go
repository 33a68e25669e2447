package nft

import (
	"errors"
	"fmt"
	"syscall"
)

// OpError is the error of a failed transaction: which operation the kernel (or the fake) refused,
// on which object, and why. Err is usually a syscall.Errno.
type OpError struct {
	Index  int    // index of the operation as Transaction.All numbers it; -1 if the batch as a whole failed
	Op     string // e.g. "add rule", "delete chain"
	Object string // e.g. `chain ip nftproxy svc-…`, with enough detail to find it
	Err    error
	// Detail is the kernel's extended-ack message, when it sent one.
	Detail string
	// Also lists the other ops the kernel refused in the same batch (it processes the whole
	// batch and reports each refused message before aborting), in batch order. Empty when only
	// this one is known (one refusal, an error found before sending, the Fake).
	Also []*OpError
}

func (e *OpError) Error() string {
	msg := e.Err.Error()
	if e.Detail != "" {
		msg += " (" + e.Detail + ")"
	}
	if e.Index < 0 {
		return fmt.Sprintf("transaction rejected: %s", msg)
	}
	return fmt.Sprintf("op %d %s %s: %s", e.Index, e.Op, e.Object, msg)
}

// Unwrap returns the underlying cause.
func (e *OpError) Unwrap() error { return e.Err }

// IsNotFound reports whether err says an object that an operation names does not exist.
func IsNotFound(err error) bool { return errors.Is(err, syscall.ENOENT) }

// IsExists reports whether err says an object exists already (with different contents).
func IsExists(err error) bool { return errors.Is(err, syscall.EEXIST) }

// IsBusy reports whether err says an object is still in use (a chain still referenced, a set
// still looked up by a rule).
func IsBusy(err error) bool { return errors.Is(err, syscall.EBUSY) }

// ErrBatchTooLarge is the cause of an Apply whose batch cannot be one netlink write: larger
// than the socket's send buffer may grow (1 GiB, or net.core.wmem_max without CAP_NET_ADMIN).
// Nothing was sent; only a smaller transaction can succeed.
var ErrBatchTooLarge = errors.New("batch does not fit one netlink write")

// IsBatchTooLarge reports whether err says a transaction was too large to send as one batch.
func IsBatchTooLarge(err error) bool { return errors.Is(err, ErrBatchTooLarge) }

// IsInvalid reports whether err says an operation was malformed (wrong key length, bad type).
func IsInvalid(err error) bool { return errors.Is(err, syscall.EINVAL) }
