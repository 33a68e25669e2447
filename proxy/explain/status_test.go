package explain

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/nftproxy/nftproxy/proxy/model"
	"github.com/nftproxy/nftproxy/proxy/nodeport"
)

// The daemon's Status follows the Tracker's rejection callbacks (a nil rejection forgets the
// Service), adds node ports not assigned as partial rejections, and FetchRejections reads back
// exactly that list over HTTP.
func TestStatusRoundTrip(t *testing.T) {
	s := NewStatus()
	bad, gone := model.ServiceKey{Namespace: "ns", Name: "bad"}, model.ServiceKey{Namespace: "ns", Name: "gone"}
	s.Set(bad, &model.Rejection{Reason: model.ReasonAnnotationSyntax, Message: "bad annotation"})
	s.Set(gone, &model.Rejection{Reason: model.ReasonInvalidPort, Message: "bad port"})
	s.Set(gone, nil)
	s.SetNodePortProblems([]nodeport.Problem{{Service: "ns/np", Port: "http", Err: errors.New("taken")}})

	srv := httptest.NewServer(s)
	defer srv.Close()
	got, err := FetchRejections(context.Background(), srv.Client(), srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	want := []Rejection{
		{Service: "ns/bad", Reason: model.ReasonAnnotationSyntax, Message: "bad annotation"},
		{Service: "ns/np", Reason: model.ReasonNodePortNotAssigned, Message: `Service ns/np port "http": taken`, Partial: true},
	}
	if len(got) != len(want) || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("fetched %+v, want %+v", got, want)
	}
	resp, err := srv.Client().Post(srv.URL, "text/plain", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %s, want 405", resp.Status)
	}
}
