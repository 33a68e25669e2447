package manifest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
)

// docSeparator starts the line that ends a YAML document.
var docSeparator = []byte("---")

// docReader splits a stream into YAML documents exactly as k8s.io/apimachinery's
// yaml.YAMLReader does — a line starting with "---" ends a document and only spaces and a
// comment may follow on it, every line of a document ends in "\n" whatever ended it in the
// stream ("\r\n", nothing at the end) — but copies each document once, at its size:
// YAMLReader grew a buffer for every line and another for every document, 30 MB of garbage
// for a 17 MB file (a fifth of what a load allocated). TestDocReader and FuzzDocReader
// compare the two.
type docReader struct {
	r    *bufio.Reader
	line []byte // the line being read, reused
	doc  []byte // the document being read, reused
}

// Read returns the next document, or io.EOF after the last one.
func (d *docReader) Read() ([]byte, error) {
	d.doc = d.doc[:0]
	for {
		line, err := d.readLine()
		if err != nil && !errors.Is(err, io.EOF) {
			return nil, err
		}
		if rest, ok := bytes.CutPrefix(line, docSeparator); ok {
			if t := bytes.TrimSpace(rest); len(t) > 0 && t[0] != '#' {
				return nil, fmt.Errorf("invalid Yaml document separator: %s", t)
			}
			if len(d.doc) > 0 {
				return bytes.Clone(d.doc), nil
			}
		}
		if err != nil { // io.EOF: the line is the "\n" after the end
			if len(d.doc) > 0 {
				return bytes.Clone(d.doc), nil
			}
			return nil, err
		}
		d.doc = append(d.doc, line...)
	}
}

// readLine returns the next line, with "\n" for its end, or "\n" and the error that ended the
// stream; the line is valid until the next call.
func (d *docReader) readLine() ([]byte, error) {
	d.line = d.line[:0]
	for {
		part, more, err := d.r.ReadLine()
		d.line = append(d.line, part...)
		if !more || err != nil {
			d.line = append(d.line, '\n')
			return d.line, err
		}
	}
}
