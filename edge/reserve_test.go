package edge

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/client"
	"github.com/ration-dev/ration/internal/testcluster"
)

const reservePolicies = `policies:
  - name: llm
    algorithm: token-bucket
    rate: 1/h
    burst: 10
    max_debt: 20
    key: [tenant]
  - name: global
    algorithm: token-bucket
    rate: 1/h
    burst: 100
`

func reserveItem(policy, tenant string, estimate int64) *api.CheckItem {
	it := item(policy, tenant, estimate)
	it.Reserve = true
	return it
}

func settleItem(policy, tenant, id string, actual int64) *api.CheckItem {
	it := item(policy, tenant, 0)
	it.Settle = &api.Settle{Reservation: id, Actual: actual}
	return it
}

// checkCode calls Check and wants the call refused with code.
func (h *harness) checkCode(t *testing.T, what string, want codes.Code, allOrNone bool, items ...*api.CheckItem) {
	t.Helper()
	_, err := h.adm.Check(context.Background(), &api.CheckRequest{Items: items, AllOrNone: allOrNone})
	if status.Code(err) != want {
		t.Errorf("%s: %v, want %v", what, err, want)
	}
}

// reserveOne reserves estimate on tenant's key of llm and returns the id.
func (h *harness) reserveOne(t *testing.T, it *api.CheckItem) string {
	t.Helper()
	r := h.check(t, false, it)
	res := r.GetResults()[0]
	if !res.GetAllowed() || res.GetReservation() == "" {
		t.Fatalf("reserve %v: %v", it, res)
	}
	return res.GetReservation()
}

func TestCheckReserveSettle(t *testing.T) {
	c := startCluster(t, reservePolicies)
	h := startEdge(t, servers(c), nil, "edge-reserve")
	testcluster.WaitFor(t, testcluster.DefaultWait, h.e.Ready)

	// Reserve 4 of 10, settle at 1: 3 come back.
	r := h.check(t, false, reserveItem("llm", "a", 4))
	res := r.GetResults()[0]
	if !res.GetAllowed() || res.GetRemaining() != 6 || res.GetReservation() == "" {
		t.Fatalf("reserve 4: %v", res)
	}
	id := res.GetReservation()
	if got := h.counter(t, "ration_edge_reservations_open", nil); got != 1 {
		t.Errorf("reservations open %v, want 1", got)
	}
	r = h.check(t, false, settleItem("llm", "a", id, 1))
	if res := r.GetResults()[0]; !r.GetAllowed() || res.GetReason() != "settled" || res.GetDebt() != 0 || res.GetExcess() != 0 {
		t.Fatalf("settle lower: %v", r)
	}
	if res := h.check(t, false, item("llm", "a", 1)).GetResults()[0]; res.GetRemaining() != 8 {
		t.Errorf("after a refund of 3: remaining %d, want 8 (%v)", res.GetRemaining(), res)
	}
	h.checkCode(t, "settle twice", codes.FailedPrecondition, false, settleItem("llm", "a", id, 1))

	// Reserve the 8 left, settle at 12: the 4 over become debt (and
	// excess beyond the edge's allowance); the key then admits nothing.
	id = h.reserveOne(t, reserveItem("llm", "a", 8))
	r = h.check(t, false, settleItem("llm", "a", id, 12))
	res = r.GetResults()[0]
	if res.GetReason() != "settled" || res.GetDebt()+res.GetExcess() != 4 || res.GetDebt() == 0 {
		t.Fatalf("settle higher by 4: %v", res)
	}
	if res := h.check(t, false, item("llm", "a", 1)).GetResults()[0]; res.GetAllowed() {
		t.Errorf("a key in debt admitted: %v", res)
	}

	// Expiry keeps the estimate.
	if allowed := expiredThenCheck(t, h, "b"); allowed {
		t.Error("an expired reservation's estimate was given back: the key admitted again")
	}

	// all_or_none: reserved together, or none.
	r = h.check(t, true, reserveItem("llm", "c", 3), reserveItem("global", "", 3))
	if !r.GetAllowed() || r.GetResults()[0].GetReservation() == "" || r.GetResults()[1].GetReservation() == "" {
		t.Fatalf("all_or_none reserve: %v", r)
	}
	r = h.check(t, true, reserveItem("global", "", 8), reserveItem("llm", "c", 8))
	if r.GetAllowed() || r.GetResults()[0].GetReservation() != "" || r.GetResults()[1].GetReason() != "limited" {
		t.Fatalf("all_or_none reserve over the tenant's 7: %v", r)
	}
	if res := h.check(t, false, item("global", "", 1)).GetResults()[0]; res.GetRemaining() != 100-3-1 {
		t.Errorf("global after a refused all_or_none reserve: remaining %d, want 96", res.GetRemaining())
	}

	// Bad input: precise codes, never a panic.
	other := h.reserveOne(t, reserveItem("llm", "d", 1))
	h.checkCode(t, "unknown id", codes.NotFound, false, settleItem("llm", "a", "no-such-id", 1))
	h.checkCode(t, "another key's id", codes.NotFound, false, settleItem("llm", "a", other, 1))
	h.checkCode(t, "another policy's id", codes.NotFound, false, settleItem("global", "d", other, 1))
	h.checkCode(t, "negative actual", codes.InvalidArgument, false, settleItem("llm", "d", other, -1))
	h.checkCode(t, "actual above MaxCost", codes.InvalidArgument, false, settleItem("llm", "d", other, client.MaxCost+1))
	h.checkCode(t, "empty id", codes.InvalidArgument, false, settleItem("llm", "d", "", 1))
	h.checkCode(t, "settle with all_or_none", codes.InvalidArgument, true, settleItem("llm", "d", other, 1))
	ca := reserveItem("llm", "d", 1)
	ca.ChargeAfter = true
	h.checkCode(t, "reserve with charge_after", codes.InvalidArgument, false, ca)
	both := settleItem("llm", "d", other, 1)
	both.Reserve = true
	h.checkCode(t, "reserve with settle", codes.InvalidArgument, false, both)
	held := item("llm", "d", 1)
	held.Hold = durationpb.New(time.Second)
	h.checkCode(t, "hold without reserve", codes.InvalidArgument, false, held)
	for _, d := range []time.Duration{0, -time.Second, 2 * time.Hour} {
		long := reserveItem("llm", "d", 1)
		long.Hold = durationpb.New(d)
		h.checkCode(t, fmt.Sprintf("hold %v", d), codes.InvalidArgument, false, long)
	}
	h.checkCode(t, "all_or_none mixing reserve", codes.InvalidArgument, true, reserveItem("llm", "d", 1), item("global", "", 1))
	if r := h.check(t, false, settleItem("llm", "d", other, 0)); r.GetResults()[0].GetReason() != "settled" {
		t.Errorf("the id survives the bad settles: %v", r)
	}
	// An estimate above the burst is refused without a reservation.
	if res := h.check(t, false, reserveItem("llm", "e", client.MaxCost)).GetResults()[0]; res.GetAllowed() || res.GetReservation() != "" {
		t.Errorf("reserve MaxCost: %v", res)
	}

	// JSON: the same through POST /v1/check.
	var out struct {
		Allowed bool `json:"allowed"`
		Results []struct {
			Reason      string `json:"reason"`
			Reservation string `json:"reservation"`
			Remaining   string `json:"remaining"`
		} `json:"results"`
	}
	code, b := postCheck(t, h, `{"items": [{"policy": "llm", "key": {"tenant": "j"}, "cost": 5, "reserve": true, "hold": "60s"}]}`)
	if err := json.Unmarshal(b, &out); err != nil || code != 200 || out.Results[0].Reservation == "" || out.Results[0].Remaining != "5" {
		t.Fatalf("JSON reserve: %d %s", code, b)
	}
	code, b = postCheck(t, h, fmt.Sprintf(`{"items": [{"policy": "llm", "key": {"tenant": "j"}, "settle": {"reservation": %q, "actual": 2}}]}`, out.Results[0].Reservation))
	if err := json.Unmarshal(b, &out); err != nil || code != 200 || out.Results[0].Reason != "settled" {
		t.Fatalf("JSON settle: %d %s", code, b)
	}
	if code, b = postCheck(t, h, `{"items": [{"policy": "llm", "key": {"tenant": "j"}, "settle": {"reservation": "nope", "actual": 2}}]}`); code != 404 || !strings.Contains(string(b), `"NotFound"`) {
		t.Errorf("JSON settle of an unknown id: %d %s", code, b)
	}
	if res := h.check(t, false, item("llm", "j", 1)).GetResults()[0]; res.GetRemaining() != 7 {
		t.Errorf("after a JSON reserve 5, settle 2: remaining %d, want 7", res.GetRemaining())
	}
}

func postCheck(t *testing.T, h *harness, body string) (int, []byte) {
	t.Helper()
	resp, err := http.Post(h.url+"/v1/check", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, b
}

// expiredThenCheck reserves all of tenant's burst with a short hold,
// waits for the hold to end unsettled, and returns whether the key then
// admits 1 (it must not: the estimate stays charged).
func expiredThenCheck(t *testing.T, h *harness, tenant string) bool {
	t.Helper()
	before := h.counter(t, "ration_edge_reservations_expired_total", nil)
	it := reserveItem("llm", tenant, 10)
	it.Hold = durationpb.New(50 * time.Millisecond)
	id := h.reserveOne(t, it)
	testcluster.WaitFor(t, testcluster.DefaultWait, func() error {
		if got := h.counter(t, "ration_edge_reservations_expired_total", nil); got < before+1 {
			return fmt.Errorf("reservations expired %v, want %v", got, before+1)
		}
		return nil
	})
	if r := h.check(t, false, settleItem("llm", tenant, id, 1)); r.GetResults()[0].GetReason() != "expired" {
		t.Errorf("settle after the hold: %v, want reason expired", r)
	}
	return h.check(t, false, item("llm", tenant, 1)).GetResults()[0].GetAllowed()
}

func TestCheckReservationsBounded(t *testing.T) {
	c := startCluster(t, reservePolicies)
	h := startEdge(t, servers(c), nil, "edge-reserve-bound", func(c *Config) { c.MaxReservations = 3 })
	testcluster.WaitFor(t, testcluster.DefaultWait, h.e.Ready)
	var ids []string
	for range 3 {
		ids = append(ids, h.reserveOne(t, reserveItem("global", "", 1)))
	}
	h.checkCode(t, "a 4th reservation", codes.ResourceExhausted, false, reserveItem("global", "", 1))
	h.checkCode(t, "an all_or_none pair", codes.ResourceExhausted, true, reserveItem("global", "", 1), reserveItem("llm", "x", 1))
	if code, b := postCheck(t, h, `{"items": [{"policy": "global", "cost": 1, "reserve": true}]}`); code != 429 || !strings.Contains(string(b), "ResourceExhausted") {
		t.Errorf("JSON reserve over the bound: %d %s", code, b)
	}
	if got := h.counter(t, "ration_edge_reservations_open", nil); got != 3 {
		t.Errorf("reservations open %v, want 3", got)
	}
	h.check(t, false, settleItem("global", "", ids[0], 1))
	fourth := h.reserveOne(t, reserveItem("global", "", 1))
	// Settled ids are remembered (a second settle: FAILED_PRECONDITION)
	// up to the bound too; beyond it they are forgotten at once.
	h.check(t, false, settleItem("global", "", ids[1], 1), settleItem("global", "", ids[2], 1))
	h.checkCode(t, "settle twice", codes.FailedPrecondition, false, settleItem("global", "", ids[2], 1))
	h.check(t, false, settleItem("global", "", fourth, 1))
	h.checkCode(t, "settle twice beyond the remembered bound", codes.NotFound, false, settleItem("global", "", fourth, 1))
	// Plain items are not bounded by it.
	if r := h.check(t, false, item("global", "", 1)); !r.GetAllowed() {
		t.Errorf("a plain item with the table full: %v", r)
	}
}
