package coordinator

import (
	"errors"
	"log/slog"
	"testing"

	"github.com/hashicorp/raft"
)

// The data dir keeps the newest SnapshotRetain snapshots, and
// DefaultSnapshotRetain when it is 0.
func TestSnapshotStoreRetains(t *testing.T) {
	for _, tc := range []struct{ retain, want int }{{0, DefaultSnapshotRetain}, {1, 1}, {5, 5}} {
		dir := t.TempDir()
		store, err := openSnapshotStore(dir, tc.retain, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		for i := range uint64(7) {
			sink, err := store.Create(raft.SnapshotVersionMax, 10*(i+1), 1, raft.Configuration{}, 1, nil)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := sink.Write([]byte("state")); err != nil {
				t.Fatal(err)
			}
			if err := sink.Close(); err != nil {
				t.Fatal(err)
			}
		}
		// Reopened as a reader (the snapshot save) sees the same ones.
		again, err := openSnapshotStore(dir, tc.retain, slog.New(slog.DiscardHandler))
		if err != nil {
			t.Fatal(err)
		}
		list, err := again.List()
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != tc.want || list[0].Index != 70 {
			t.Errorf("retain %d: %d snapshots kept, newest at %d; want %d, newest at 70", tc.retain, len(list), list[0].Index, tc.want)
		}
	}
}

func TestConfigRefusesNegativeSnapshotRetain(t *testing.T) {
	c := TestConfig()
	c.ID, c.DataDir = "s1", t.TempDir()
	c.RaftAddr, c.GRPCAddr, c.GossipAddr = "127.0.0.1:7300", "127.0.0.1:7400", "127.0.0.1:7200"
	if err := c.Validate(); err != nil {
		t.Fatalf("a valid config: %v", err)
	}
	c.SnapshotRetain = -1
	if err := c.Validate(); !errors.Is(err, ErrInvalidConfig) {
		t.Fatalf("SnapshotRetain -1: %v, want ErrInvalidConfig", err)
	}
}
