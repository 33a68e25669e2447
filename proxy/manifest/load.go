// Package manifest is the file source of nftproxy's embedded mode: it loads Service,
// EndpointSlice and Node manifests from a directory, fills in the defaults the API server would,
// watches the directory for changes and feeds the result into a model.Tracker.
//
// Only the directory itself is read, not subdirectories, and only regular files (or symlinks
// to them) named *.yaml, *.yml or *.json whose names do not start with '.'; this matches a
// ConfigMap mounted as a volume, whose "..data" machinery is hidden. A YAML file may hold
// several documents separated by "---"; any document may be a "kind: List". Decoding is strict:
// an unknown or duplicated field is an error, so a typo such as "targetport" is reported instead
// of silently defaulted.
package manifest

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

// Objects is everything loaded from a directory, in file order.
type Objects struct {
	Services       []*corev1.Service
	EndpointSlices []*discoveryv1.EndpointSlice
	Nodes          []*corev1.Node
	// Skipped lists documents of kinds nftproxy does not use (Deployments and the like), so a
	// caller can mention them; they are not errors.
	Skipped []Skipped
	// From maps each loaded object to the file it came from.
	From map[Ref]string
}

// Ref names one loaded object. Namespace is empty for Nodes.
type Ref struct {
	Kind      string
	Namespace string
	Name      string
}

// String returns "Kind ns/name" or "Kind name".
func (r Ref) String() string {
	if r.Namespace == "" {
		return r.Kind + " " + r.Name
	}
	return r.Kind + " " + r.Namespace + "/" + r.Name
}

// Skipped is a document of a kind nftproxy does not read.
type Skipped struct {
	File       string
	Document   int
	APIVersion string
	Kind       string
	Name       string
}

// FileError says which file and document could not be used and why. All objects of that file
// are left out of the load. Document counts from 1; 0 means the file as a whole (unreadable).
type FileError struct {
	File     string
	Document int
	Err      error
}

// Error returns e.g. `services.yaml document 2: ...`.
func (e FileError) Error() string {
	if e.Document == 0 {
		return fmt.Sprintf("%s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("%s document %d: %v", e.File, e.Document, e.Err)
}

// Unwrap returns the underlying error.
func (e FileError) Unwrap() error { return e.Err }

// newDecoder returns a strict decoder over a scheme holding only the types nftproxy reads, so
// nothing else (and no client library) is pulled in.
func newDecoder() runtime.Decoder {
	scheme := runtime.NewScheme()
	scheme.AddKnownTypes(corev1.SchemeGroupVersion, &corev1.Service{}, &corev1.Node{}, &corev1.List{})
	scheme.AddKnownTypes(discoveryv1.SchemeGroupVersion, &discoveryv1.EndpointSlice{})
	return serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
}

// Load reads every manifest file of dir. Files are read in name order. A file with any error
// contributes no objects and one FileError; other files load normally. An object defined twice
// keeps its first definition and the second is reported as a FileError.
func Load(dir string) (Objects, []FileError) {
	objs := Objects{From: map[Ref]string{}}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return objs, []FileError{{File: dir, Err: fmt.Errorf("read manifest directory: %w", err)}}
	}
	dec := newDecoder()
	var errs []FileError
	for _, e := range entries {
		name := e.Name()
		if !isManifestName(name) {
			continue
		}
		path := filepath.Join(dir, name)
		if st, err := os.Stat(path); err != nil || !st.Mode().IsRegular() {
			continue
		}
		fileObjs, ferr := loadFile(dec, path, name)
		if ferr != nil {
			errs = append(errs, *ferr)
			continue
		}
		errs = append(errs, objs.merge(fileObjs, name)...)
	}
	return objs, errs
}

func isManifestName(name string) bool {
	if strings.HasPrefix(name, ".") {
		return false
	}
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// merge adds one file's objects, refusing duplicates of objects already loaded.
func (o *Objects) merge(f Objects, file string) []FileError {
	var errs []FileError
	add := func(ref Ref) bool {
		if first, dup := o.From[ref]; dup {
			errs = append(errs, FileError{File: file,
				Err: fmt.Errorf("%s is also defined in %s; the first definition is used, remove one of them", ref, first)})
			return false
		}
		o.From[ref] = file
		return true
	}
	for _, s := range f.Services {
		if add(Ref{"Service", s.Namespace, s.Name}) {
			o.Services = append(o.Services, s)
		}
	}
	for _, s := range f.EndpointSlices {
		if add(Ref{"EndpointSlice", s.Namespace, s.Name}) {
			o.EndpointSlices = append(o.EndpointSlices, s)
		}
	}
	for _, n := range f.Nodes {
		if add(Ref{"Node", "", n.Name}) {
			o.Nodes = append(o.Nodes, n)
		}
	}
	o.Skipped = append(o.Skipped, f.Skipped...)
	return errs
}

// loadFile decodes one file; any error discards the whole file.
func loadFile(dec runtime.Decoder, path, name string) (Objects, *FileError) {
	data, err := os.ReadFile(path)
	if err != nil {
		return Objects{}, &FileError{File: name, Err: err}
	}
	docs, err := splitDocuments(data)
	if err != nil {
		return Objects{}, &FileError{File: name, Err: err}
	}
	var out Objects
	for i, doc := range docs {
		if err := decodeDocument(dec, doc, name, i+1, &out); err != nil {
			return Objects{}, &FileError{File: name, Document: i + 1, Err: err}
		}
	}
	return out, nil
}

// splitDocuments splits YAML on "---" lines; JSON is one document.
func splitDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, fmt.Errorf("split YAML documents: %w", err)
		}
		docs = append(docs, doc)
	}
}

// typeHeader is read first to name what a document is, even when it is of an unknown kind.
type typeHeader struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
}

func decodeDocument(dec runtime.Decoder, doc []byte, file string, index int, out *Objects) error {
	js, err := yaml.YAMLToJSON(doc)
	if err != nil {
		return fmt.Errorf("not valid YAML or JSON: %w", err)
	}
	if t := bytes.TrimSpace(js); len(t) == 0 || string(t) == "null" {
		return nil // empty document, e.g. a trailing "---" or only comments
	}
	var h typeHeader
	if err := yaml.Unmarshal(js, &h); err != nil {
		return fmt.Errorf("not a Kubernetes object (want a mapping with apiVersion and kind): %w", err)
	}
	if h.APIVersion == "" || h.Kind == "" {
		return fmt.Errorf("apiVersion and kind are required (got apiVersion %q, kind %q)", h.APIVersion, h.Kind)
	}
	obj, _, err := dec.Decode(js, nil, nil)
	if runtime.IsNotRegisteredError(err) {
		out.Skipped = append(out.Skipped, Skipped{File: file, Document: index, APIVersion: h.APIVersion, Kind: h.Kind, Name: h.Metadata.Name})
		return nil
	}
	if err != nil {
		return fmt.Errorf("decode %s %q: %w", h.Kind, h.Metadata.Name, err)
	}
	switch o := obj.(type) {
	case *corev1.Service:
		defaultService(o)
		out.Services = append(out.Services, o)
	case *discoveryv1.EndpointSlice:
		defaultEndpointSlice(o)
		out.EndpointSlices = append(out.EndpointSlices, o)
	case *corev1.Node:
		out.Nodes = append(out.Nodes, o)
	case *corev1.List:
		for j, item := range o.Items {
			if err := decodeDocument(dec, item.Raw, file, index, out); err != nil {
				return fmt.Errorf("List item %d: %w", j+1, err)
			}
		}
	}
	return nil
}
