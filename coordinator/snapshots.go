package coordinator

import (
	"log/slog"
	"path/filepath"

	"github.com/hashicorp/raft"
)

// DefaultSnapshotRetain is how many Raft snapshots a data dir keeps when
// Config.SnapshotRetain is 0.
const DefaultSnapshotRetain = 3

// openSnapshotStore opens the Raft snapshot store of dataDir (its raft/
// subdirectory), which keeps the newest retain snapshots
// (DefaultSnapshotRetain if retain <= 0): creating one removes the older
// ones beyond that. Everything that reads or writes a data dir's
// snapshots opens the store here: the server (New), the snapshot save
// that streams the latest one (Admin.SnapshotSave), and Recover.
func openSnapshotStore(dataDir string, retain int, logger *slog.Logger) (*raft.FileSnapshotStore, error) {
	if retain <= 0 {
		retain = DefaultSnapshotRetain
	}
	return raft.NewFileSnapshotStoreWithLogger(filepath.Join(dataDir, "raft"), retain, hclogFor(logger, "snapshots"))
}
