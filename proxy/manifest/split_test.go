package manifest

import (
	"bufio"
	"errors"
	"io"
	"reflect"
	"strings"
	"testing"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// splitCases are streams on both sides of each rule of document splitting.
var splitCases = []string{
	"", "\n", "a: 1", "a: 1\n", "---", "---\n", "---\na: 1\n", "a: 1\n---\nb: 2\n", "a: 1\n---\n---\nb: 2\n---\n",
	"--- # comment\na: 1\n---   \nb: 2", "---x\na: 1\n", "a: 1\n--- x\n", "a: 1\n----\n", " ---\na: 1\n",
	"a: 1\r\n---\r\nb: 2\r\n", "a: 1\r", "a: |\n  ---\n  b\n", "{\"a\":1}\n---\n{\"b\":2}", "\n\n---\n\n",
	"a: " + strings.Repeat("x", 100) + "\n---\n" + strings.Repeat("y", 50),
}

// split reads every document of in with next, and the error that ended it ("EOF" at the end).
// The documents are all kept before they are looked at, as the loader keeps a batch.
func split(in string, next func(r *bufio.Reader) func() ([]byte, error)) []string {
	read := next(bufio.NewReaderSize(strings.NewReader(in), 16)) // 16: lines longer than the buffer
	var docs [][]byte
	var end string
	for end == "" {
		doc, err := read()
		switch {
		case errors.Is(err, io.EOF):
			end = "EOF"
		case err != nil:
			end = "error: " + err.Error()
		default:
			docs = append(docs, doc)
		}
	}
	var out []string
	for _, d := range docs {
		out = append(out, string(d))
	}
	return append(out, end)
}

func checkSplit(t *testing.T, in string) {
	t.Helper()
	got := split(in, func(r *bufio.Reader) func() ([]byte, error) { return (&docReader{r: r}).Read })
	want := split(in, func(r *bufio.Reader) func() ([]byte, error) { return utilyaml.NewYAMLReader(r).Read })
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("docReader splits %q into %q, want %q (yaml.YAMLReader)", in, got, want)
	}
}

// TestDocReader: documents are split as k8s.io/apimachinery's YAMLReader splits them.
func TestDocReader(t *testing.T) {
	for _, in := range splitCases {
		checkSplit(t, in)
	}
}

// FuzzDocReader: the same on any stream.
func FuzzDocReader(f *testing.F) {
	for _, in := range splitCases {
		f.Add(in)
	}
	f.Fuzz(checkSplit)
}
