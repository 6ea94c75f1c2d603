package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"google.golang.org/grpc/codes"

	"github.com/ration-dev/ration/api"
	"github.com/ration-dev/ration/internal/rpcerr"
)

// restoreChunk is the size of the chunks a restore streams.
const restoreChunk = 256 << 10

var snapshotVerbs = []verb{
	{
		name:     "snapshot save",
		synopsis: "[--stale] FILE",
		summary:  "save the cluster state to FILE",
		help: `Asks for a snapshot of the cluster state and writes it to FILE. The leader
takes it (another server forwards the request) once it has applied every
committed change, so FILE holds every change acknowledged before the save.
Without a leader (quorum lost) that fails; --stale saves the state of the
server asked instead, which may lack the latest changes.
The file appears complete or not at all: the chunks go to a temporary file
next to it, which is renamed once everything arrived. A large state may
need a --timeout longer than the default.`,
		args: []string{"FILE"},
		flags: func(fs *flag.FlagSet, o *invocation) {
			fs.BoolVar(&o.stale, "stale", false, "save the state of the server asked, without the leader (for a cluster without one)")
		},
		run: snapshotSave,
	},
	{
		name:     "snapshot restore",
		synopsis: "FILE",
		summary:  "replace the cluster state with the snapshot in FILE",
		help: `Streams the snapshot in FILE (written by 'rationctl snapshot save') to the
leader, which checks it decodes, takes it on as the cluster state and
replicates it to the followers. Everything the cluster held is replaced:
this is for disaster recovery.`,
		args: []string{"FILE"},
		prepare: func(o *invocation) error {
			f, err := os.Open(o.args[0])
			if err != nil {
				return err
			}
			return f.Close()
		},
		run: snapshotRestore,
	},
}

func snapshotSave(ctx context.Context, o *invocation) (err error) {
	path := o.args[0]
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	stream, err := o.admin().SnapshotSave(ctx, &api.SnapshotSaveRequest{Stale: o.stale})
	if err != nil {
		return err
	}
	var n int64
	for {
		c, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		w, err := tmp.Write(c.GetData())
		n += int64(w)
		if err != nil {
			return err
		}
	}
	if n == 0 {
		return errors.New("the server sent an empty snapshot; nothing written")
	}
	if err := tmp.Sync(); err != nil {
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	_, err = fmt.Fprintf(o.stdout, "saved a snapshot of %d bytes from %s to %s\n", n, o.addr, path)
	return err
}

func snapshotRestore(ctx context.Context, o *invocation) error {
	f, err := os.Open(o.args[0])
	if err != nil {
		return err
	}
	defer f.Close()

	// A restore must reach the leader itself: find it through Status.
	st, err := o.admin().Status(ctx, &api.StatusRequest{})
	if err != nil {
		return err
	}
	leader := st.GetLeader()
	if leader == "" {
		return rpcerr.Errorf(codes.Unavailable, "the cluster has no leader (asked %s)", st.GetAnsweredBy())
	}
	admin := o.admin()
	if st.GetAnsweredBy() != leader {
		addr := ""
		for _, s := range st.GetServers() {
			if s.GetId() == leader {
				addr = s.GetGrpcAddress()
			}
		}
		if addr == "" {
			return rpcerr.Errorf(codes.Unavailable, "the gRPC address of leader %s is not known to %s", leader, st.GetAnsweredBy())
		}
		deadline, _ := ctx.Deadline()
		conn, err := dialReady(addr, deadline)
		if err != nil {
			return rpcerr.Errorf(codes.Unavailable, "leader %s at %s: %v", leader, addr, err)
		}
		defer conn.Close()
		admin = api.NewAdminClient(conn)
	}

	stream, err := admin.SnapshotRestore(ctx)
	if err != nil {
		return err
	}
	buf := make([]byte, restoreChunk)
	var n int64
	for {
		r, rerr := f.Read(buf)
		if r > 0 {
			if err := stream.Send(&api.SnapshotChunk{Data: buf[:r]}); err != nil {
				if err == io.EOF { // the server ended the stream: its status says why
					_, err = stream.CloseAndRecv()
				}
				return err
			}
			n += int64(r)
		}
		if rerr == io.EOF {
			break
		}
		if rerr != nil {
			return rerr
		}
	}
	resp, err := stream.CloseAndRecv()
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(o.stdout, "restored %s (%d bytes) on leader %s; applied index %d\n", o.args[0], n, leader, resp.GetIndex())
	return err
}
