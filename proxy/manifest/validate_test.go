package manifest

import (
	"fmt"
	"net/netip"
	"strings"
	"testing"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/nftproxy/nftproxy/proxy/model"
)

// Manifest mode makes the API server's checks: each case is one Service (namespace, name and
// spec as YAML flow bodies) and the reason it is refused with, or "" when it is valid.
func TestServiceValidation(t *testing.T) {
	long63 := strings.Repeat("a", 63)
	tests := []struct {
		name, ns, svc, spec string
		reason, inMessage   string
	}{
		{"plain", "team-a", "web", "clusterIP: 10.96.0.10, ports: [{name: http, port: 80}]", "", ""},
		{"limits of the API", long63, long63, "type: NodePort, clusterIP: 10.96.0.10, ports: [{name: abcdefghijklmno, port: 80, nodePort: 30080, targetPort: abcdefghijklmno}]", "", ""},
		{"headless without ports", "default", "h", "clusterIP: None", "", ""},
		{"space-padded source range", "default", "lb", "type: LoadBalancer, clusterIP: 10.96.0.10, loadBalancerSourceRanges: [' 10.0.0.0/8 '], ports: [{name: http, port: 80}]", "", ""},
		{"dual stack", "default", "ds", "clusterIPs: [10.96.0.10, 'fd00:96::10'], ports: [{name: http, port: 80}]", "", ""},

		{"slash in name", "default", `"a/b"`, "clusterIP: 10.96.0.10, ports: [{port: 80}]", model.ReasonAPIValidation, `metadata.name: Invalid value: "a/b"`},
		{"slash in namespace", `"team/a"`, "web", "clusterIP: 10.96.0.10, ports: [{port: 80}]", model.ReasonAPIValidation, `metadata.namespace: Invalid value: "team/a"`},
		{"NUL in name", "default", `"web\0"`, "clusterIP: 10.96.0.10, ports: [{port: 80}]", model.ReasonAPIValidation, `metadata.name: Invalid value: "web\x00"`},
		{"upper case", "default", "Web", "clusterIP: 10.96.0.10, ports: [{port: 80}]", model.ReasonAPIValidation, "DNS-1035"},
		{"name 64 long", "default", long63 + "a", "clusterIP: 10.96.0.10, ports: [{port: 80}]", model.ReasonAPIValidation, "must be no more than 63"},
		{"name starts with digit", "default", "1web", "clusterIP: 10.96.0.10, ports: [{port: 80}]", model.ReasonAPIValidation, "DNS-1035"},
		{"bad label", "default", "web", "clusterIP: 10.96.0.10, ports: [{port: 80}]", model.ReasonAPIValidation, ""},
		{"unknown type", "default", "web", "type: Magic, clusterIP: 10.96.0.10, ports: [{port: 80}]", model.ReasonAPIValidation, "spec.type"},
		{"affinity timeout", "default", "web", "sessionAffinity: ClientIP, sessionAffinityConfig: {clientIP: {timeoutSeconds: 90000}}, clusterIP: 10.96.0.10, ports: [{port: 80}]", model.ReasonAPIValidation, "timeoutSeconds"},
		{"traffic policy", "default", "web", "type: NodePort, externalTrafficPolicy: Nearby, clusterIP: 10.96.0.10, ports: [{port: 80}]", model.ReasonAPIValidation, "externalTrafficPolicy"},

		{"port name with slash", "default", "web", "clusterIP: 10.96.0.10, ports: [{name: a/b, port: 80}]", model.ReasonInvalidPort, "spec.ports[0].name"},
		{"port name too long", "default", "web", "clusterIP: 10.96.0.10, ports: [{name: " + long63 + "a, port: 80}]", model.ReasonInvalidPort, "spec.ports[0].name"},
		{"unnamed ports", "default", "web", "clusterIP: 10.96.0.10, ports: [{port: 80}, {port: 81}]", model.ReasonInvalidPort, "spec.ports[0].name: Required"},
		{"duplicate port names", "default", "web", "clusterIP: 10.96.0.10, ports: [{name: a, port: 80}, {name: a, port: 81}]", model.ReasonInvalidPort, "Duplicate"},
		{"duplicate ports", "default", "web", "clusterIP: 10.96.0.10, ports: [{name: a, port: 80}, {name: b, port: 80}]", model.ReasonInvalidPort, "Duplicate"},
		{"target port name", "default", "web", "clusterIP: 10.96.0.10, ports: [{name: a, port: 80, targetPort: a-very-long-port-name}]", model.ReasonInvalidPort, "spec.ports[0].targetPort"},
		{"node port on ClusterIP", "default", "web", "clusterIP: 10.96.0.10, ports: [{name: a, port: 80, nodePort: 30080}]", model.ReasonInvalidPort, "nodePort: Forbidden"},
		{"port 0", "default", "web", "clusterIP: 10.96.0.10, ports: [{name: a, port: 0}]", model.ReasonInvalidPort, "spec.ports[0].port"},
		{"no ports", "default", "web", "clusterIP: 10.96.0.10", model.ReasonInvalidPort, "spec.ports: Required"},
		// KEP-2610: an all-ports Service lists no ports; the model forwards every protocol.
		{"all-ports without ports", "default", "web", "clusterIP: 10.96.0.10", "", ""},
		{"all-ports false without ports", "default", "web", "clusterIP: 10.96.0.10", model.ReasonInvalidPort, "spec.ports: Required"},
		{"protocol", "default", "web", "clusterIP: 10.96.0.10, ports: [{name: a, port: 7, protocol: ICMP}]", model.ReasonInvalidPort, "spec.ports[0].protocol"},

		{"cluster IP", "default", "web", "clusterIP: 10.96.0.300, ports: [{port: 80}]", model.ReasonInvalidAddress, "spec.clusterIPs[0]"},
		{"family mismatch", "default", "web", "clusterIP: 10.96.0.10, ipFamilies: [IPv6], ports: [{port: 80}]", model.ReasonInvalidAddress, "spec.ipFamilies[0]"},
		{"same family twice", "default", "web", "clusterIPs: [10.96.0.10, 10.96.0.11], ports: [{port: 80}]", model.ReasonInvalidAddress, "one address of each family"},
		{"loopback external IP", "default", "web", "clusterIP: 10.96.0.10, externalIPs: [127.0.0.1], ports: [{port: 80}]", model.ReasonInvalidAddress, "loopback"},
		{"metadata external IP", "default", "web", "clusterIP: 10.96.0.10, externalIPs: [169.254.169.254], ports: [{port: 80}]", model.ReasonInvalidAddress, "metadata"},
		{"source range", "default", "web", "type: LoadBalancer, clusterIP: 10.96.0.10, loadBalancerSourceRanges: [10.0.0.0/33], ports: [{port: 80}]", model.ReasonInvalidAddress, "loadBalancerSourceRanges[0]"},
		{"ingress IP", "default", "web", "type: LoadBalancer, clusterIP: 10.96.0.10, ports: [{port: 80}]}\nstatus: {loadBalancer: {ingress: [{ip: 1.2.3}]}", model.ReasonInvalidAddress, "status.loadBalancer.ingress[0].ip"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			meta := fmt.Sprintf("name: %s, namespace: %s", tc.svc, tc.ns)
			switch tc.name {
			case "bad label":
				meta += ", labels: {'a/b/c': x}"
			case "all-ports without ports":
				meta += ", annotations: {nftproxy.io/all-ports: 'true'}"
			case "all-ports false without ports":
				meta += ", annotations: {nftproxy.io/all-ports: 'false'}"
			}
			dir := t.TempDir()
			writeFiles(t, dir, map[string]string{"svc.yaml": fmt.Sprintf("apiVersion: v1\nkind: Service\nmetadata: {%s}\nspec: {%s}\n", meta, tc.spec)})
			objs, errs := Load(dir)
			if len(errs) != 0 {
				t.Fatalf("errors = %v; want the document decoded", errs)
			}
			if tc.reason == "" {
				if len(objs.Refused) != 0 || len(objs.Services) != 1 {
					t.Fatalf("refused = %+v; want the Service accepted", objs.Refused[0].Rejection)
				}
				return
			}
			if len(objs.Refused) != 1 || len(objs.Services) != 0 {
				t.Fatalf("%d refused, %d accepted; want it refused with %s", len(objs.Refused), len(objs.Services), tc.reason)
			}
			r := objs.Refused[0].Rejection
			key := model.ServiceKey{Namespace: objs.Refused[0].Service.Namespace, Name: objs.Refused[0].Service.Name}
			if r.Reason != tc.reason || !strings.Contains(r.Message, tc.inMessage) ||
				!strings.HasPrefix(r.Message, "service "+key.String()+": svc.yaml document 1: ") || !strings.HasSuffix(r.Message, "fix the manifest") {
				t.Fatalf("rejection = %s: %q; want %s naming the file, the document and %q", r.Reason, r.Message, tc.reason, tc.inMessage)
			}
		})
	}
}

// A refused Service is a rejected Service in the Tracker (log, metric, render list), like one
// the model rejects; once fixed it is accepted, and deleting its file removes it.
func TestFeederRefusedService(t *testing.T) {
	dir := t.TempDir()
	var events []string
	tr := model.NewTracker(model.TrackerConfig{Logger: logr.Discard(), OnRejection: func(k model.ServiceKey, r *model.Rejection) {
		if r == nil {
			events = append(events, k.String()+" accepted")
			return
		}
		events = append(events, k.String()+" "+r.Reason)
	}})
	f := NewFeeder(tr)
	bad := "apiVersion: v1\nkind: Service\nmetadata: {name: web, namespace: default}\nspec: {clusterIP: 10.96.0.20, ports: [{name: a/b, port: 80}]}\n"
	slash := "apiVersion: v1\nkind: Service\nmetadata: {name: b, namespace: \"a/a\"}\nspec: {clusterIP: 10.96.0.11, ports: [{port: 80}]}\n"
	writeFiles(t, dir, map[string]string{"web.yaml": bad, "slash.yaml": slash, "ok.yaml": svcYAML("ok")})
	f.Feed(Load(dir))
	f.Feed(Load(dir)) // unchanged: no second event
	snap := tr.Snapshot()
	if s := snap.Services[model.ServiceKey{Namespace: "default", Name: "web"}]; s == nil || s.Rejected == nil || s.Rejected.Reason != model.ReasonInvalidPort {
		t.Fatalf("web = %+v; want rejected InvalidPort", s)
	}
	if s := snap.Services[model.ServiceKey{Namespace: "default", Name: "ok"}]; s == nil || s.Rejected != nil || len(s.Ports) != 1 {
		t.Fatalf("ok = %+v; want accepted", s)
	}
	writeFiles(t, dir, map[string]string{"web.yaml": strings.Replace(bad, "a/b", "http", 1)})
	f.Feed(Load(dir))
	if s := tr.Service(model.ServiceKey{Namespace: "default", Name: "web"}); s == nil || s.Rejected != nil || len(s.Ports) != 1 {
		t.Fatalf("fixed web = %+v; want accepted", s)
	}
	writeFiles(t, dir, map[string]string{"web.yaml": bad})
	f.Feed(Load(dir))
	if err := removeFile(dir, "slash.yaml"); err != nil {
		t.Fatal(err)
	}
	f.Feed(Load(dir))
	want := []string{"a/a/b APIValidation", "default/web InvalidPort", "default/web accepted", "default/web InvalidPort", "a/a/b accepted"}
	if strings.Join(events, ", ") != strings.Join(want, ", ") {
		t.Fatalf("rejection events = %v; want %v", events, want)
	}
	if s := tr.Service(model.ServiceKey{Namespace: "a/a", Name: "b"}); s != nil {
		t.Fatalf("a/a/b = %+v after its file was deleted; want gone", s)
	}
}

// dnsSubdomainCases are names on both sides of each rule of a DNS-1123 subdomain.
var dnsSubdomainCases = []string{
	"", "a", "node-1", "node-1.zone-a.example", "1", "0.0", "a-b-c", "a--b",
	"-a", "a-", "a.", ".a", "a..b", "a.-b", "a-.b", "A", "node_1", "nöde", "a b", "a/b",
	strings.Repeat("a", 253), strings.Repeat("a", 254), strings.Repeat("a.", 126) + "a", strings.Repeat("a", 64),
}

// TestDNSSubdomain: the node-name check agrees with the API machinery's regular expression.
func TestDNSSubdomain(t *testing.T) {
	for _, s := range dnsSubdomainCases {
		want := len(validation.IsDNS1123Subdomain(s)) == 0
		if got := isDNSSubdomain(s); got != want {
			t.Errorf("isDNSSubdomain(%q) = %v, want %v (validation.IsDNS1123Subdomain)", s, got, want)
		}
	}
}

// FuzzDNSSubdomain: the same on any string.
func FuzzDNSSubdomain(f *testing.F) {
	for _, s := range dnsSubdomainCases {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if got, want := isDNSSubdomain(s), len(validation.IsDNS1123Subdomain(s)) == 0; got != want {
			t.Fatalf("isDNSSubdomain(%q) = %v, want %v (validation.IsDNS1123Subdomain)", s, got, want)
		}
	})
}

// ipCases are addresses on both sides of each rule of validation.IsValidIP.
var ipCases = []string{
	"10.0.0.1", "0.0.0.0", "255.255.255.255", "010.0.0.1", "10.0.0", "10.0.0.256", " 10.0.0.1", "1.2.3.4 ",
	"fd00::1", "FD00::1", "fd00:0::1", "fd00:0:0:0:0:0:0:1", "::", "::1", "::ffff:10.0.0.1", "::10.0.0.1",
	"fe80::1%eth0", "2001:db8::", "2001:db8:0:0:1:0:0:1", "2001:db8::1:0:0:1", "1::", "", "x",
}

// TestCanonicalIP: the endpoint address check agrees with the API machinery's.
func TestCanonicalIP(t *testing.T) {
	for _, s := range ipCases {
		checkCanonicalIP(t, s)
	}
}

func checkCanonicalIP(t *testing.T, s string) {
	t.Helper()
	errs := validation.IsValidIP(field.NewPath("ip"), s)
	a, ok := canonicalIP(s)
	if ok != (len(errs) == 0) {
		t.Fatalf("canonicalIP(%q) = %v, want %v (validation.IsValidIP: %v)", s, ok, len(errs) == 0, errs)
	}
	if want, _ := netip.ParseAddr(s); ok && a != want {
		t.Fatalf("canonicalIP(%q) = %v, want %v", s, a, want)
	}
}

// FuzzCanonicalIP: the same on any string.
func FuzzCanonicalIP(f *testing.F) {
	for _, s := range ipCases {
		f.Add(s)
	}
	f.Fuzz(checkCanonicalIP)
}
