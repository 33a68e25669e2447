package manifest

import (
	"bytes"
	"encoding/json"
	"fmt"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/yaml"
)

// decoder decodes documents into API objects. The kinds nftproxy reads (Service,
// EndpointSlice, Node) written as JSON are decoded straight into their types by a strict
// encoding/json/v2 decoder (typed); every other document (YAML is first converted to JSON,
// Lists, kinds nftproxy skips), and every document the typed decoder refuses, goes to the API
// machinery's strict UniversalDeserializer (universal), whose result — the object, or the error
// and its message — is then the one used. So the typed decoder only has to agree with universal
// on the documents it accepts, which the tests check (TestTypedAgreesWithUniversal,
// FuzzTypedAgreesWithUniversal); it never has to reproduce an error.
//
// universal reads a document twice (encoding/json for apiVersion and kind, then
// sigs.k8s.io/json's reflection with its strict checks): at 10,000 Services and their slices
// (20,001 JSON documents) 0.5 s of CPU per load, the typed decoder 0.18 s.
type decoder struct {
	universal runtime.Decoder
	strict    jsonv2.Options
}

// newDecoder returns a decoder whose universal decoder knows only the types nftproxy reads,
// so nothing else (and no client library) is pulled in. It is safe for concurrent use.
func newDecoder() *decoder {
	scheme := runtime.NewScheme()
	scheme.AddKnownTypes(corev1.SchemeGroupVersion, &corev1.Service{}, &corev1.Node{}, &corev1.List{})
	scheme.AddKnownTypes(discoveryv1.SchemeGroupVersion, &discoveryv1.EndpointSlice{})
	return &decoder{
		universal: serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer(),
		// Names are matched case-sensitively (v2's default, as sigs.k8s.io/json does), and a
		// name given twice in one object is an error (jsontext's default).
		strict: jsonv2.RejectUnknownMembers(true),
	}
}

// typed decodes js into a new object of its kind when js is a JSON object of a kind it knows
// and decodes strictly, and returns nil otherwise (then universal has the last word).
func (d *decoder) typed(js []byte) runtime.Object {
	var obj runtime.Object
	switch apiVersion, kind := jsonTypeOf(js); {
	case apiVersion == "v1" && kind == "Service":
		obj = &corev1.Service{}
	case apiVersion == "discovery.k8s.io/v1" && kind == "EndpointSlice":
		obj = &discoveryv1.EndpointSlice{}
	case apiVersion == "v1" && kind == "Node":
		obj = &corev1.Node{}
	default:
		return nil
	}
	if err := jsonv2.Unmarshal(js, obj, d.strict); err != nil {
		return nil
	}
	return obj
}

// jsonTypeOf returns the apiVersion and kind of a JSON object, reading its members only until
// both are found (encoders write them first), or "" when js is not a JSON object or they are
// not strings. A member given twice is not told apart here: the strict decoding that follows
// refuses it.
func jsonTypeOf(js []byte) (apiVersion, kind string) {
	dec := jsontext.NewDecoder(bytes.NewBuffer(js))
	if tok, err := dec.ReadToken(); err != nil || tok.Kind() != '{' {
		return "", ""
	}
	for apiVersion == "" || kind == "" {
		name, err := dec.ReadToken()
		if err != nil || name.Kind() != '"' {
			return "", ""
		}
		switch field := name.String(); field {
		case "apiVersion", "kind":
			val, err := dec.ReadToken()
			if err != nil || val.Kind() != '"' {
				return "", ""
			}
			if field == "kind" {
				kind = val.String()
			} else {
				apiVersion = val.String()
			}
		default:
			if err := dec.SkipValue(); err != nil {
				return "", ""
			}
		}
	}
	return apiVersion, kind
}

// typeHeader names what a document is when universal did not decode it, even when it is of
// an unknown kind.
type typeHeader struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name string `json:"name"`
	} `json:"metadata"`
}

// decodeDocument decodes one document, or one item of a List at depth (0 for a document).
func decodeDocument(dec *decoder, doc []byte, file string, index, depth int, out *Objects) error {
	// A JSON document the typed decoder takes is valid JSON; anything else is tested for it.
	obj := dec.typed(doc)
	if obj == nil {
		var err error
		if obj, err = dec.decodeOther(doc, file, index, depth, out); obj == nil || err != nil {
			return err
		}
	}
	switch o := obj.(type) {
	case *corev1.Service:
		defaultService(o)
		out.addService(o, file, index)
	case *discoveryv1.EndpointSlice:
		defaultEndpointSlice(o)
		out.addSlice(o, file, index)
	case *corev1.Node:
		if errs := validateNode(o); len(errs) > 0 {
			out.Invalid = append(out.Invalid, Invalid{File: file, Document: index, Ref: Ref{"Node", "", o.Name}, Endpoint: -1, Problem: errorsText(errs)})
			return nil
		}
		out.Nodes = append(out.Nodes, o)
	case *corev1.List:
		if depth+1 > MaxListDepth && len(o.Items) > 0 {
			return fmt.Errorf("a List nested %d deep: at most %d levels of List are read; flatten the Lists", depth+1, MaxListDepth)
		}
		for j, item := range o.Items {
			if err := decodeDocument(dec, item.Raw, file, index, depth+1, out); err != nil {
				return fmt.Errorf("List item %d: %w", j+1, err)
			}
		}
	}
	return nil
}

// decodeOther decodes a document the typed decoder did not take: YAML (converted to JSON,
// then given to the typed decoder again), and what universal decodes. It returns nil for an
// empty document and for a kind nftproxy skips (recorded in out.Skipped).
func (d *decoder) decodeOther(doc []byte, file string, index, depth int, out *Objects) (runtime.Object, error) {
	js := doc
	// List items are JSON already, and so are documents written as JSON: the strict decoder
	// below refuses their duplicate keys itself, and converting them through the YAML parser
	// cost 90% of a large file's load (2 GB allocated for 16 MB of JSON).
	if depth == 0 && !json.Valid(doc) {
		var err error
		if js, err = yaml.YAMLToJSONStrict(doc); err != nil {
			return nil, fmt.Errorf("not valid YAML or JSON (a mapping key given twice is an error too): %w", err)
		}
		if obj := d.typed(js); obj != nil {
			return obj, nil
		}
	}
	if t := bytes.TrimSpace(js); len(t) == 0 || string(t) == "null" {
		return nil, nil // empty document, e.g. a trailing "---" or only comments
	}
	obj, _, err := d.universal.Decode(js, nil, nil)
	if err == nil {
		return obj, nil
	}
	// The header is read only now: a document the decoder takes has both apiVersion and
	// kind, and parsing every document a second time for them cost ~0.2 s of CPU in a
	// 20,000-document load.
	var h typeHeader
	if err := json.Unmarshal(js, &h); err != nil {
		return nil, fmt.Errorf("not a Kubernetes object (want a mapping with apiVersion and kind): %w", err)
	}
	if h.APIVersion == "" || h.Kind == "" {
		return nil, fmt.Errorf("apiVersion and kind are required (got apiVersion %q, kind %q)", h.APIVersion, h.Kind)
	}
	if runtime.IsNotRegisteredError(err) {
		out.Skipped = append(out.Skipped, Skipped{File: file, Document: index, APIVersion: h.APIVersion, Kind: h.Kind, Name: h.Metadata.Name})
		return nil, nil
	}
	return nil, fmt.Errorf("decode %s %q: %w", h.Kind, h.Metadata.Name, err)
}
