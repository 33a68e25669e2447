package golden

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestDiff(t *testing.T) {
	if d := Diff("a\nb\n", "a\nb\n"); d != "" {
		t.Errorf("Diff of equal texts = %q, want empty", d)
	}
	d := Diff("chain x {\n\trule one\n\trule two\n}\n", "chain x {\n\trule one\n}\n")
	if !strings.Contains(d, "-") || !strings.Contains(d, "rule two") || strings.Contains(d, "+") {
		t.Errorf("Diff of a deleted line does not show it as removed:\n%s", d)
	}
	if d := Diff("a\n", "a"); !strings.Contains(d, "no newline at end") {
		t.Errorf("Diff of a missing final newline does not say so:\n%s", d)
	}
}

// recorder is a testing.TB that keeps failures instead of failing the test.
type recorder struct {
	testing.TB
	errs []string
}

func (r *recorder) Helper()                           {}
func (r *recorder) Errorf(format string, args ...any) { r.errs = append(r.errs, format) }
func (r *recorder) Fatalf(format string, args ...any) { r.errs = append(r.errs, format) }

func TestCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "x.txt")
	r := &recorder{TB: t}
	Check(r, path, "one\n")
	if len(r.errs) != 1 {
		t.Fatalf("Check of a missing file reported %d failures, want 1", len(r.errs))
	}
	if err := os.WriteFile(path, []byte("one\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r.errs = nil
	Check(r, path, "one\n")
	Check(r, path, "two\n")
	if len(r.errs) != 1 {
		t.Errorf("Check of an equal and a different text reported %d failures, want 1", len(r.errs))
	}
}
