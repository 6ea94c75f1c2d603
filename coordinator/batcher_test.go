package coordinator

import "testing"

// An entry holds at most maxOps requests and maxBytes encoded bytes; the
// request that would overflow the byte budget starts the next entry.
func TestCollectBudgets(t *testing.T) {
	req := func(size int) *batchReq { return &batchReq{size: size} }
	in := make(chan *batchReq, 10)
	for _, sz := range []int{10, 10, 10, 50, 10} {
		in <- req(sz)
	}
	batch, carry := collect(req(10), in, 100, 45)
	if len(batch) != 4 || carry == nil || carry.size != 50 {
		t.Fatalf("byte budget: %d requests, carry %v", len(batch), carry)
	}
	batch, carry = collect(carry, in, 100, 45) // over budget alone: still sent, alone
	if len(batch) != 1 || batch[0].size != 50 || carry == nil || carry.size != 10 {
		t.Fatalf("after the carry: %d requests, carry %v", len(batch), carry)
	}
	for range 5 {
		in <- req(1)
	}
	if batch, carry = collect(req(1), in, 3, 1000); len(batch) != 3 || carry != nil || len(in) != 3 {
		t.Fatalf("op budget: %d requests, %d left queued", len(batch), len(in))
	}
}
