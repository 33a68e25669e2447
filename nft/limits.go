package nft

import (
	"fmt"
	"strings"
)

// The kernel's and nft's limits on the strings an object carries. Callers that build names or
// comments from user input fit them to these limits where they build them (so that no user
// string can make a commit fail); Apply checks them again, on the Kernel and on the Fake alike,
// and refuses the op before anything is sent.
const (
	// MaxNameLen is the longest table, chain or set name in bytes: the kernel's NFT_NAME_MAXLEN
	// (256) counts the terminating NUL.
	MaxNameLen = 255
	// MaxCommentLen is the longest comment in bytes that nft writes and reads back
	// (NFTNL_UDATA_COMMENT_MAXLEN, 128, counts the terminating NUL). The kernel would store
	// longer userdata, but nft could then not list it faithfully.
	MaxCommentLen = 127
)

// CheckName reports why name cannot be the name of a chain or set, or nil. A NUL is refused:
// the kernel keeps a name only up to its first NUL, so what it lists back would differ from what
// was asked for, and every later comparison would see drift.
func CheckName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("empty name")
	case len(name) > MaxNameLen:
		return fmt.Errorf("name of %d bytes is too long: the kernel accepts at most %d", len(name), MaxNameLen)
	case strings.IndexByte(name, 0) >= 0:
		return fmt.Errorf("name %q holds a NUL byte: the kernel would keep only what comes before it", name)
	}
	return nil
}

// CheckComment reports why c cannot be a comment, or nil (an empty comment is no comment).
// As for names, a NUL would cut what nft lists back.
func CheckComment(c string) error {
	switch {
	case len(c) > MaxCommentLen:
		return fmt.Errorf("comment of %d bytes is too long: nft accepts at most %d", len(c), MaxCommentLen)
	case strings.IndexByte(c, 0) >= 0:
		return fmt.Errorf("comment %q holds a NUL byte: nft would list only what comes before it", c)
	}
	return nil
}

// checkOpStrings checks the names and comment an op carries against the limits above. It runs
// for every element of a full sync, so it builds nothing.
func checkOpStrings(op Op) error {
	name, name2, comment := "", "", ""
	switch o := op.Object.(type) {
	case *Chain:
		name = o.Name
	case *Set:
		name, comment = o.Name, o.Comment
	case *Element:
		name, comment = o.Set, o.Comment
		if o.Verdict != nil {
			name2 = o.Verdict.Chain
		}
	case *Rule:
		name, comment = o.Chain, o.Comment
	default:
		return nil
	}
	if err := CheckName(name); err != nil {
		return err
	}
	if name2 != "" {
		if err := CheckName(name2); err != nil {
			return err
		}
	}
	if op.Verb == VerbAdd {
		return CheckComment(comment)
	}
	return nil
}
