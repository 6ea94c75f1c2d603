package edge

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/coordinator"
	"github.com/ration-dev/ration/internal/testcluster"
)

// fuzzPolicies: buckets large enough that the fuzzer's admissions do not
// run them dry, with no key, one key attribute and two.
const fuzzPolicies = `policies:
  - name: open
    algorithm: token-bucket
    rate: 1000000
    burst: 1000000
  - name: per-tenant
    algorithm: token-bucket
    rate: 1000000
    burst: 1000000
    key: [tenant]
  - name: per-route
    algorithm: token-bucket
    rate: 1000000
    burst: 1000000
    key: [tenant, route]
`

// fuzzKeyAttrs is each fuzzPolicies policy's key attributes.
var fuzzKeyAttrs = map[string][]string{"open": nil, "per-tenant": {"tenant"}, "per-route": {"tenant", "route"}}

// FuzzCheckHTTP posts arbitrary bodies to POST /v1/check of an edge of a
// real three-node cluster. Nothing panics; the answer is 200 exactly when
// the body is a CheckRequest (protojson) that validateCheck accepts, else
// a 4xx whose JSON body says InvalidArgument and why; a 200 answers every
// item, as a CheckResponse that parses, allowed overall only if every
// item is; no item is admitted under a policy the cluster does not have
// or without each of its policy's key attributes; and a body that parses
// survives the round trip through protojson unchanged.
func FuzzCheckHTTP(f *testing.F) {
	for _, s := range []string{
		`{"items": [{"policy": "per-tenant", "key": {"tenant": "a"}, "cost": 2}]}`,
		`{"items": [{"policy": "open"}, {"policy": "per-route", "key": {"tenant": "a", "route": "/x"}}], "all_or_none": true}`,
		`{"items": [{"policy": "per-tenant"}, {"policy": "per-route", "key": {"route": "/x"}}]}`,
		`{"items": [{"policy": "per-tenant", "key": {"tenant": "", "x": "y"}, "cost": "9223372036854775807"}]}`,
		`{"allOrNone": true, "items": [{"policy": "open", "cost": 1}, {"policy": "open", "cost": 2}]}`,
		`{"items": [{"policy": "nope", "key": {"tenant": "a"}}]}`,
		`{"items": [{"policy": "open", "cost": -1}]}`,
		`{"items": []}`, `{"itemz": []}`, `not json`, `{"items": [{"policy": "open", "policy": "open"}]}`,
		`{"items": [{"policy": "open", "key": {"": "a"}}]}`, `{"items": [{"policy": "open", "cost": 1.5}]}`,
		"{\"items\": [{\"policy\": \"per-tenant\", \"key\": {\"tenant\": \"\xff\"}}]}", ``, `null`,
	} {
		f.Add([]byte(s))
	}
	// The servers log nowhere: testcluster logs through f, and f.Log
	// panics once the fuzz target runs (a worker then dies silently).
	quiet := testcluster.WithConfig(func(_ int, c *coordinator.Config) { c.Logger = slog.New(slog.DiscardHandler) })
	c := testcluster.New(f, 3, testcluster.WithPolicies(fuzzPolicies), quiet)
	c.WaitForLeader(f)
	c.WaitForFeatures(f)
	// The default first-lease wait (50ms), not the harness's: each item's
	// first decision may wait that long, and a body of 64 new keys of a
	// policy the cluster does not have waits it 64 times over (the client
	// probes such a policy one key at a time), within the fuzzer's 10 s
	// per input.
	h := startEdge(f, servers(c), nil, "edge-fuzz", withFirstLeaseWait(50*time.Millisecond))
	testcluster.WaitFor(f, testcluster.DefaultWait, h.e.Ready)
	handler := h.e.HTTPHandler(nil)
	f.Fuzz(func(t *testing.T, body []byte) {
		rec := httptest.NewRecorder()
		handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/v1/check", bytes.NewReader(body)))
		if ct := rec.Header().Get("Content-Type"); ct != "application/json" {
			t.Fatalf("POST %q: %d with Content-Type %q", body, rec.Code, ct)
		}

		req := &api.CheckRequest{}
		var refusal error
		if err := protojson.Unmarshal(body, req); err != nil {
			refusal = err
		} else {
			roundTrip(t, req)
			_, refusal = validateCheck(req)
		}
		if refusal != nil {
			checkRefused(t, body, rec, refusal)
			return
		}
		if rec.Code != http.StatusOK {
			t.Fatalf("POST %q: %d %s, want 200", body, rec.Code, rec.Body)
		}
		resp := &api.CheckResponse{}
		if err := protojson.Unmarshal(rec.Body.Bytes(), resp); err != nil {
			t.Fatalf("POST %q: 200 with a body that is not a CheckResponse (%v): %s", body, err, rec.Body)
		}
		if len(resp.GetResults()) != len(req.GetItems()) {
			t.Fatalf("POST %q: %d results for %d items", body, len(resp.GetResults()), len(req.GetItems()))
		}
		all := true
		for i, r := range resp.GetResults() {
			all = all && r.GetAllowed()
			if !r.GetAllowed() {
				continue
			}
			it := req.GetItems()[i]
			attrs, known := fuzzKeyAttrs[it.GetPolicy()]
			if !known {
				t.Fatalf("POST %q: item %d admitted under policy %q, which the cluster does not have", body, i, it.GetPolicy())
			}
			for _, a := range attrs {
				if _, ok := it.GetKey()[a]; !ok {
					t.Fatalf("POST %q: item %d admitted without key attribute %q of policy %q", body, i, a, it.GetPolicy())
				}
			}
		}
		if resp.GetAllowed() != all {
			t.Fatalf("POST %q: allowed %v, its results' %v", body, resp.GetAllowed(), all)
		}
	})
}

// roundTrip checks that a decoded request encodes and decodes to itself.
func roundTrip(t *testing.T, req *api.CheckRequest) {
	t.Helper()
	b, err := protojson.Marshal(req)
	if err != nil {
		t.Fatalf("%v: encodes with %v", req, err)
	}
	again := &api.CheckRequest{}
	if err := protojson.Unmarshal(b, again); err != nil || !proto.Equal(req, again) {
		t.Fatalf("%v: encodes as %s, which decodes to %v (%v)", req, b, again, err)
	}
}

// checkRefused checks a 4xx answer to a body that is not a valid Check:
// JSON {"code": "InvalidArgument", "message": ...}, with validateCheck's
// own message when it was validateCheck that refused.
func checkRefused(t *testing.T, body []byte, rec *httptest.ResponseRecorder, refusal error) {
	t.Helper()
	if rec.Code != http.StatusBadRequest && rec.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("POST %q: %d %s, want 400 (%v)", body, rec.Code, rec.Body, refusal)
	}
	var out struct{ Code, Message string }
	if err := json.Unmarshal(rec.Body.Bytes(), &out); err != nil || out.Code != "InvalidArgument" || out.Message == "" {
		t.Fatalf("POST %q: %d %s: want {code: InvalidArgument, message} (%v)", body, rec.Code, rec.Body, err)
	}
	if st, ok := status.FromError(refusal); ok && out.Message != st.Message() {
		t.Fatalf("POST %q: message %q, want validateCheck's %q", body, out.Message, st.Message())
	}
}
