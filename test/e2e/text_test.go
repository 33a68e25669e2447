package e2e

import "strings"

// containsKey reports whether the ruleset names the Service in a comment.
func containsKey(ruleset string, s service) bool { return strings.Contains(ruleset, `"`+s.key()) }

// containsAll reports whether s contains every one of subs.
func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
