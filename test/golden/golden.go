// Package golden compares text a test produced with text the repository holds, and shows a
// difference as a line diff a reviewer can read. It is the one home of the `-update` flag:
// `go test ./PKG -run NAME -update` rewrites the files a test compares against instead of
// comparing, and the change to review is then `git diff` of testdata.
//
// It imports nothing of nftproxy, so any package's tests (nft's included) can use it.
package golden

import (
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata from what the tests produce, instead of comparing")

// Diff is "" when want and got are the same text, else a diff of their lines: "-" only in want,
// "+" only in got, long runs of equal lines elided. Lines are compared as written (tabs and
// trailing spaces count).
func Diff(want, got string) string {
	if want == got {
		return ""
	}
	return cmp.Diff(lines(want), lines(got))
}

// lines splits s into lines, keeping an empty last line when s does not end with a newline so
// that a missing final newline shows in the diff.
func lines(s string) []string {
	ls := strings.Split(s, "\n")
	if len(ls) > 0 && ls[len(ls)-1] == "" {
		ls = ls[:len(ls)-1]
	} else {
		ls = append(ls, "(no newline at end)")
	}
	return ls
}

// Check compares got with the file at path (relative to the test's package directory). With
// -update it writes got to path (creating its directory) and passes; otherwise a missing file
// or a difference fails t with the diff and the command that rewrites the file.
func Check(t testing.TB, path, got string) {
	t.Helper()
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatalf("golden: %v", err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatalf("golden: %v", err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("golden: %v (run `make golden` or the test with -update to write it, then review the file)", err)
		return
	}
	if d := Diff(string(want), got); d != "" {
		t.Errorf("output differs from %s (- file, + got); if the change is intended, run `make golden` (or this test with -update) and review git diff:\n%s", path, d)
	}
}

// Updating reports whether the run rewrites golden files: a test that checks something beside
// the golden comparison may skip it while the files are being rewritten.
func Updating() bool { return *update }
