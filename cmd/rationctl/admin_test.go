package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/ration-dev/ration/api"
)

// fakeAdmin is an api.AdminServer with canned answers, for testing the
// commands' requests, rendering and error handling without a cluster.
type fakeAdmin struct {
	api.UnimplementedAdminServer

	status   *api.StatusResponse
	members  *api.MembersResponse
	policies *api.ListPoliciesResponse
	leases   *api.ListLeasesResponse
	snapshot [][]byte
	// newLeader is LeaderTransfer's answer.
	newLeader string
	// err, if set, is every call's answer.
	err error

	mu       sync.Mutex
	requests []any // every request received, in order
	restored []byte
}

func (f *fakeAdmin) record(req any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.requests = append(f.requests, req)
	return f.err
}

func (f *fakeAdmin) setErr(err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err = err
}

func (f *fakeAdmin) lastRequest() any {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.requests) == 0 {
		return nil
	}
	return f.requests[len(f.requests)-1]
}

func (f *fakeAdmin) Status(_ context.Context, req *api.StatusRequest) (*api.StatusResponse, error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	return f.status, nil
}

func (f *fakeAdmin) Members(_ context.Context, req *api.MembersRequest) (*api.MembersResponse, error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	return f.members, nil
}

func (f *fakeAdmin) ApplyPolicies(_ context.Context, req *api.ApplyPoliciesRequest) (*api.ApplyPoliciesResponse, error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	return &api.ApplyPoliciesResponse{Applied: []string{"per-tenant", "global"}, Index: 12}, nil
}

func (f *fakeAdmin) GetPolicy(_ context.Context, req *api.GetPolicyRequest) (*api.PolicyInfo, error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	for _, p := range f.policies.GetPolicies() {
		if p.GetName() == req.GetName() {
			return p, nil
		}
	}
	return nil, status.Errorf(codes.NotFound, "not found: policy %q", req.GetName())
}

func (f *fakeAdmin) ListPolicies(_ context.Context, req *api.ListPoliciesRequest) (*api.ListPoliciesResponse, error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	return f.policies, nil
}

func (f *fakeAdmin) DeletePolicy(_ context.Context, req *api.DeletePolicyRequest) (*api.DeletePolicyResponse, error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	return &api.DeletePolicyResponse{Index: 13}, nil
}

func (f *fakeAdmin) ListLeases(_ context.Context, req *api.ListLeasesRequest) (*api.ListLeasesResponse, error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	return f.leases, nil
}

func (f *fakeAdmin) LeaderTransfer(_ context.Context, req *api.LeaderTransferRequest) (*api.LeaderTransferResponse, error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	return &api.LeaderTransferResponse{NewLeader: f.newLeader}, nil
}

func (f *fakeAdmin) RemoveServer(_ context.Context, req *api.RemoveServerRequest) (*api.RemoveServerResponse, error) {
	if err := f.record(req); err != nil {
		return nil, err
	}
	return &api.RemoveServerResponse{Index: 14}, nil
}

func (f *fakeAdmin) SnapshotSave(req *api.SnapshotSaveRequest, stream grpc.ServerStreamingServer[api.SnapshotChunk]) error {
	if err := f.record(req); err != nil {
		return err
	}
	for _, c := range f.snapshot {
		if err := stream.Send(&api.SnapshotChunk{Data: c}); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeAdmin) SnapshotRestore(stream grpc.ClientStreamingServer[api.SnapshotChunk, api.SnapshotRestoreResponse]) error {
	if err := f.record("restore"); err != nil {
		return err
	}
	var buf bytes.Buffer
	for {
		c, err := stream.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			return err
		}
		buf.Write(c.GetData())
	}
	f.mu.Lock()
	f.restored = buf.Bytes()
	f.mu.Unlock()
	return stream.SendAndClose(&api.SnapshotRestoreResponse{Index: 99})
}

// serve starts f on a loopback port and returns its address.
func serve(t *testing.T, f *fakeAdmin) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := grpc.NewServer()
	api.RegisterAdminServer(s, f)
	go s.Serve(l)
	t.Cleanup(s.Stop)
	return l.Addr().String()
}

// deadAddr is a loopback address nothing listens on.
func deadAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

const tenantYAML = `policies:
  - name: per-tenant
    algorithm: token-bucket
    rate: 10
    burst: 20
    start: full
    charge: requests
    key: [tenant]
    lease:
      duration: 30s
`

const globalYAML = `policies:
  - name: global
    algorithm: token-bucket
    rate: 0.5
    burst: 1
    start: full
    charge: cost
`

// cannedCluster is a three-server cluster as a fake: node2 leads, node3 is
// down and gossip does not know its gRPC address.
func cannedCluster() *fakeAdmin {
	return &fakeAdmin{
		status: &api.StatusResponse{
			Leader: "node2", Term: 7, CommitIndex: 1234, AppliedIndex: 1233, AnsweredBy: "node1",
			ClusterTimeNanos: 83_456_789_123, Policies: 2, Keys: 3, Leases: 2,
			LastContactNanos: 12_345_678, LastLogIndex: 1234,
			Version: "v0.1.1", Revision: "5e2f0a9c7d3b1e4f6a8c0b2d4e6f8a0c1b3d5e7f",
			Servers: []*api.ServerStatus{
				{Id: "node1", RaftAddress: "127.0.0.1:7410", GrpcAddress: "127.0.0.1:7400", Suffrage: "voter", State: "follower", Healthy: true},
				{Id: "node2", RaftAddress: "127.0.0.1:7411", GrpcAddress: "127.0.0.1:7401", Suffrage: "voter", State: "leader", Healthy: true},
				{Id: "node3", RaftAddress: "127.0.0.1:7412", Suffrage: "voter", State: "follower", Healthy: false},
			},
		},
		members: &api.MembersResponse{Members: []*api.Member{
			{Name: "node1", Address: "127.0.0.1:7420", Status: "alive", Meta: map[string]string{"id": "node1", "raft": "127.0.0.1:7410", "grpc": "127.0.0.1:7400"}},
			{Name: "node2", Address: "127.0.0.1:7421", Status: "alive", Meta: map[string]string{"id": "node2", "raft": "127.0.0.1:7411", "grpc": "127.0.0.1:7401"}},
			{Name: "node3", Address: "127.0.0.1:7422", Status: "dead"},
		}},
		policies: &api.ListPoliciesResponse{Policies: []*api.PolicyInfo{
			{Name: "per-tenant", Yaml: tenantYAML, Keys: 2, Leases: 2},
			{Name: "global", Yaml: globalYAML, Keys: 1, Leases: 0},
			{Name: "future", Yaml: "policies:\n  - name: future\n    algorithm: token-bucket\n    warp: 9\n", Keys: 0, Leases: 0},
		}},
		leases: &api.ListLeasesResponse{
			ClusterTimeNanos: 83_456_789_123,
			Leases: []*api.LeaseInfo{
				{Policy: "per-tenant", Key: "acme", ClientId: "api-7f9c", Incarnation: 3, LeaseId: 41,
					RateMilliPerSec: 5000, CapMilli: 10000, StartMilli: 10000, ExpiresNanos: 87_000_000_000, ExpiresInNanos: 3_543_210_877,
					HeldRateMilliPerSec: 6667, HeldCapMilli: 13333},
				{Policy: "per-tenant", Key: "acme", ClientId: "api-b21e", Incarnation: 1, LeaseId: 44,
					RateMilliPerSec: 3333, CapMilli: 6667, StartMilli: 0, ExpiresNanos: 83_000_000_000, ExpiresInNanos: -456_789_123,
					HeldRateMilliPerSec: 3333, HeldCapMilli: 6667},
			},
			Keys: []*api.KeyInfo{
				{Policy: "global", Key: "", PoolMilli: 500, RateMilliPerSec: 500, CapacityMilli: 1000},
				{Policy: "per-tenant", Key: "acme", PoolMilli: 1667, RateMilliPerSec: 10000, CapacityMilli: 20000},
				{Policy: "per-tenant", Key: "beta%2Fgamma", PoolMilli: 20000, RateMilliPerSec: 10000, CapacityMilli: 20000},
			},
		},
		snapshot:  [][]byte{[]byte("snapshot-part-1;"), []byte("snapshot-part-2")},
		newLeader: "node3",
	}
}

// cannedNode2 is node2 of cannedCluster answering Status itself: the
// leader, 6 entries ahead of node1, one release behind it (an upgrade
// half done).
func cannedNode2() *fakeAdmin {
	f := cannedCluster()
	st := f.status // a fresh canned cluster's: not shared
	st.AnsweredBy, st.CommitIndex, st.AppliedIndex, st.LastContactNanos, st.LastLogIndex = "node2", 1240, 1240, 0, 1240
	st.Version, st.Revision = "v0.1.0", "28bdce9c0a1b2c3d4e5f60718293a4b5c6d7e8f9"
	return f
}

// cannedAutopilot is cannedNode2 with the autopilot state a leader
// reports: node3 failed in gossip, so one of three voters is unhealthy.
func cannedAutopilot() *fakeAdmin {
	f := cannedNode2()
	stable := int64(1_700_000_000_000_000_000)
	f.status.Autopilot = &api.AutopilotState{
		Healthy: false, FailureTolerance: 0, UpdatedUnixNanos: stable + 42_000_000_000,
		StabilizationTimeNanos: 10_000_000_000, MaxLastContactNanos: 500_000_000, MaxTrailingLogs: 1000, ReapTimeoutNanos: 72 * 3600_000_000_000,
		Servers: []*api.AutopilotServer{
			{Id: "node1", RaftState: "voter", NodeStatus: "alive", Healthy: true, LastContactNanos: 8_000_000, LastIndex: 1240, LastTerm: 7, StableSinceUnixNanos: stable},
			{Id: "node2", RaftState: "leader", NodeStatus: "alive", Healthy: true, LastIndex: 1240, LastTerm: 7, StableSinceUnixNanos: stable},
			{Id: "node3", RaftState: "voter", NodeStatus: "failed", Reason: "failed in gossip", LastContactNanos: 31_400_000_000, LastIndex: 1100, LastTerm: 7,
				StableSinceUnixNanos: stable + 10_600_000_000},
		},
	}
	return f
}

// cannedAddrs maps the gRPC addresses of cannedCluster's servers to the
// fakes serving them in a test; status dials them through dialServer.
var (
	cannedMu    sync.Mutex
	cannedAddrs = map[string]string{}
)

func init() {
	real := dialServer
	dialServer = func(addr string) (*grpc.ClientConn, error) {
		cannedMu.Lock()
		to, ok := cannedAddrs[addr]
		cannedMu.Unlock()
		if ok {
			return real(to)
		}
		if strings.HasPrefix(addr, "127.0.0.1:740") {
			// A canned address with no fake: never dial a real server
			// someone runs on this machine.
			return nil, errors.New("no fake serves " + addr)
		}
		return real(addr)
	}
}

// serveCanned serves fake f as the canned server at cannedAddr.
func serveCanned(t *testing.T, cannedAddr string, f *fakeAdmin) {
	addr := serve(t, f)
	cannedMu.Lock()
	cannedAddrs[cannedAddr] = addr
	cannedMu.Unlock()
	t.Cleanup(func() {
		cannedMu.Lock()
		delete(cannedAddrs, cannedAddr)
		cannedMu.Unlock()
	})
}

// TestAdminGolden runs each reading command against the canned cluster
// and compares its output with testdata/golden/admin-<name>.stdout.
func TestAdminGolden(t *testing.T) {
	addr := serve(t, cannedCluster())
	serveCanned(t, "127.0.0.1:7401", cannedNode2())
	for _, c := range []struct {
		name string
		args []string
	}{
		{"status", []string{"status"}},
		{"status-json", []string{"status", "--json"}},
		{"members", []string{"members"}},
		{"members-json", []string{"members", "--json"}},
		{"policy-list", []string{"policy", "list"}},
		{"policy-list-json", []string{"policy", "list", "--json"}},
		{"policy-get", []string{"policy", "get", "per-tenant"}},
		{"policy-get-json", []string{"policy", "get", "--json", "per-tenant"}},
		{"leases", []string{"leases"}},
		{"leases-json", []string{"leases", "--json"}},
		{"policy-apply", []string{"policy", "apply", "-f", "testdata/tenants.yaml"}},
		{"policy-delete", []string{"policy", "delete", "global"}},
		{"leader-transfer", []string{"leader", "transfer"}},
		{"server-remove", []string{"server", "remove", "node3"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(append(c.args, "--servers", addr), &stdout, &stderr); code != 0 || stderr.Len() > 0 {
				t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
			}
			checkGolden(t, goldenPath("admin-"+c.name, ".stdout"), stdout.Bytes())
		})
	}
}

// TestAdminGoldenAutopilot: status shows the health the leader's
// autopilot computed when the leader reports it (the other goldens' leader
// is older: rationctl judges, and says so).
func TestAdminGoldenAutopilot(t *testing.T) {
	addr := serve(t, cannedCluster())
	serveCanned(t, "127.0.0.1:7401", cannedAutopilot())
	for _, c := range []struct {
		name string
		args []string
	}{
		{"status-autopilot", []string{"status"}},
		{"status-autopilot-json", []string{"status", "--json"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			if code := run(append(c.args, "--servers", addr), &stdout, &stderr); code != 0 || stderr.Len() > 0 {
				t.Fatalf("exit %d, stderr:\n%s", code, stderr.String())
			}
			checkGolden(t, goldenPath("admin-"+c.name, ".stdout"), stdout.Bytes())
		})
	}
}

// TestAdminRequests: the flags and arguments reach the server as they
// should.
func TestAdminRequests(t *testing.T) {
	f := cannedCluster()
	addr := serve(t, f)
	tenants, err := os.ReadFile("testdata/tenants.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string // the request, in its text form
	}{
		{[]string{"leases", "--policy", "per-tenant", "--key", "acme"}, (&api.ListLeasesRequest{Policy: "per-tenant", Key: "acme"}).String()},
		{[]string{"leases"}, (&api.ListLeasesRequest{}).String()},
		{[]string{"policy", "apply", "-f", "testdata/tenants.yaml"}, (&api.ApplyPoliciesRequest{Yaml: string(tenants)}).String()},
		{[]string{"policy", "get", "global"}, (&api.GetPolicyRequest{Name: "global"}).String()},
		{[]string{"policy", "delete", "global"}, (&api.DeletePolicyRequest{Name: "global"}).String()},
		{[]string{"leader", "transfer", "node3"}, (&api.LeaderTransferRequest{Id: "node3"}).String()},
		{[]string{"leader", "transfer"}, (&api.LeaderTransferRequest{}).String()},
		{[]string{"server", "remove", "node3"}, (&api.RemoveServerRequest{Id: "node3"}).String()},
		{[]string{"snapshot", "save", filepath.Join(t.TempDir(), "s.snap")}, (&api.SnapshotSaveRequest{}).String()},
		{[]string{"snapshot", "save", "--stale", filepath.Join(t.TempDir(), "s.snap")}, (&api.SnapshotSaveRequest{Stale: true}).String()},
	} {
		var stdout, stderr bytes.Buffer
		if code := run(append(c.args, "--servers", addr), &stdout, &stderr); code != 0 {
			t.Errorf("%v: exit %d: %s", c.args, code, stderr.String())
			continue
		}
		got := f.lastRequest().(interface{ String() string }).String()
		if got != c.want {
			t.Errorf("%v: sent %s, want %s", c.args, got, c.want)
		}
	}
}

// TestAdminUsageErrors: mistakes on the command line exit 2, before any
// connection (the servers here do not exist).
func TestAdminUsageErrors(t *testing.T) {
	dead := deadAddr(t)
	t.Setenv(serversEnv, dead)
	for _, c := range []struct {
		args []string
		want string // the first line of stderr
	}{
		{[]string{"status", "extra"}, `rationctl status: unexpected argument "extra"`},
		{[]string{"status", "--bogus"}, "rationctl status: flag provided but not defined: -bogus"},
		{[]string{"status", "--timeout", "0s"}, "rationctl status: --timeout 0s must be positive"},
		{[]string{"status", "--timeout", "soon"}, `rationctl status: invalid value "soon" for flag -timeout: parse error`},
		{[]string{"status", "--servers", "nohost"}, `rationctl status: --servers "nohost": "nohost" is not HOST:PORT`},
		{[]string{"status", "--servers", dead + ",,"}, `rationctl status: --servers "` + dead + `,,": "" is not HOST:PORT`},
		{[]string{"leader", "transfer", "--json"}, "rationctl leader transfer: flag provided but not defined: -json"},
		{[]string{"policy"}, "rationctl policy: missing command; want apply, diff, import, get, list or delete"},
		{[]string{"policy", "frob"}, `rationctl policy: unknown command "frob"; want apply, diff, import, get, list or delete`},
		{[]string{"policy", "apply"}, "rationctl policy apply: -f FILE is required"},
		{[]string{"policy", "apply", "-f"}, "rationctl policy apply: flag needs an argument: -f"},
		{[]string{"policy", "get"}, "rationctl policy get: NAME is required"},
		{[]string{"policy", "get", "a", "b"}, `rationctl policy get: unexpected argument "b"`},
		{[]string{"policy", "delete"}, "rationctl policy delete: NAME is required"},
		{[]string{"policy", "list", "x"}, `rationctl policy list: unexpected argument "x"`},
		{[]string{"leases", "per-tenant"}, `rationctl leases: unexpected argument "per-tenant"`},
		{[]string{"snapshot"}, "rationctl snapshot: missing command; want save or restore"},
		{[]string{"snapshot", "save"}, "rationctl snapshot save: FILE is required"},
		{[]string{"snapshot", "restore"}, "rationctl snapshot restore: FILE is required"},
		{[]string{"leader"}, "rationctl leader: missing command; want transfer"},
		{[]string{"leader", "transfer", "a", "b"}, `rationctl leader transfer: unexpected argument "b"`},
		{[]string{"server", "remove"}, "rationctl server remove: ID is required"},
		{[]string{"server", "add", "x"}, `rationctl server: unknown command "add"; want remove`},
	} {
		var stdout, stderr bytes.Buffer
		code := run(c.args, &stdout, &stderr)
		first, _, _ := strings.Cut(stderr.String(), "\n")
		if code != 2 || first != c.want || stdout.Len() > 0 {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant exit 2 and first line %q", c.args, code, stderr.String(), c.want)
		}
	}
}

// TestAdminErrors: an error from the server is exit 1, each line of its
// message prefixed with the command and the gRPC code.
func TestAdminErrors(t *testing.T) {
	f := cannedCluster()
	f.err = status.Error(codes.InvalidArgument,
		`line 4: policy "x": field "rate": "abc" is not a number; want tokens per second like 10 or 0.5, or tokens per interval like 1/m, 100/h, 5/s or 3/30s`+"\n"+
			`line 9: policy "w": field "window": "60" is not a duration; want a Go duration like 1s, 1m or 1h30m, or whole days like 7d: at least 1ms (the cluster leases 1s or longer), at most 366d`)
	addr := serve(t, f)
	dead := deadAddr(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"policy", "apply", "-f", "testdata/bad-values.yaml", "--servers", addr},
			`rationctl policy apply: InvalidArgument: line 4: policy "x": field "rate": "abc" is not a number; want tokens per second like 10 or 0.5, or tokens per interval like 1/m, 100/h, 5/s or 3/30s` + "\n" +
				`rationctl policy apply: InvalidArgument: line 9: policy "w": field "window": "60" is not a duration; want a Go duration like 1s, 1m or 1h30m, or whole days like 7d: at least 1ms (the cluster leases 1s or longer), at most 366d` + "\n"},
		{[]string{"policy", "apply", "-f", "testdata/nope.yaml", "--servers", addr},
			"rationctl policy apply: open testdata/nope.yaml: no such file or directory\n"},
		{[]string{"status", "--servers", dead},
			"rationctl status: Unavailable: no server answered (" + dead + ": dial tcp " + dead + ": connect: connection refused)\n"},
		{[]string{"snapshot", "restore", "testdata/nope.snap", "--servers", addr},
			"rationctl snapshot restore: open testdata/nope.snap: no such file or directory\n"},
	} {
		var stdout, stderr bytes.Buffer
		code := run(c.args, &stdout, &stderr)
		if code != 1 || stderr.String() != c.want || stdout.Len() > 0 {
			t.Errorf("%v: exit %d, stderr:\n%s\nwant exit 1 and:\n%s", c.args, code, stderr.String(), c.want)
		}
	}

	f.setErr(status.Error(codes.NotFound, `not found: policy "nope"`))
	var stdout, stderr bytes.Buffer
	if code := run([]string{"policy", "get", "nope", "--servers", addr}, &stdout, &stderr); code != 1 ||
		stderr.String() != "rationctl policy get: NotFound: not found: policy \"nope\"\n" {
		t.Errorf("exit %d, stderr:\n%s", code, stderr.String())
	}
}

// TestServersInOrder: servers that do not answer are skipped; the first
// that answers is used; RATION_SERVERS is the default for --servers.
func TestServersInOrder(t *testing.T) {
	addr := serve(t, cannedCluster())
	dead := deadAddr(t)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"status", "--servers", dead + "," + addr}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "Leader:             node2") {
		t.Errorf("exit %d, stdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}

	t.Setenv(serversEnv, dead+", "+addr)
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"status"}, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "Leader:             node2") {
		t.Errorf("with %s: exit %d, stdout:\n%s\nstderr:\n%s", serversEnv, code, stdout.String(), stderr.String())
	}
	// The flag wins over the environment.
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"status", "--servers", dead}, &stdout, &stderr); code != 1 || !strings.Contains(stderr.String(), dead) || strings.Contains(stderr.String(), addr) {
		t.Errorf("--servers over %s: exit %d, stderr:\n%s", serversEnv, code, stderr.String())
	}
	t.Setenv(serversEnv, "bad")
	stderr.Reset()
	if code := run([]string{"status"}, &stdout, &stderr); code != 2 || !strings.HasPrefix(stderr.String(), `rationctl status: RATION_SERVERS "bad": "bad" is not HOST:PORT`) {
		t.Errorf("bad %s: exit %d, stderr:\n%s", serversEnv, code, stderr.String())
	}
}

func TestSnapshotSaveRestore(t *testing.T) {
	leader := cannedCluster()
	leaderAddr := serve(t, leader)
	follower := cannedCluster()
	// The follower knows where the leader is; a restore must go there.
	follower.status.Servers[1].GrpcAddress = leaderAddr
	followerAddr := serve(t, follower)

	dir := t.TempDir()
	path := filepath.Join(dir, "state.snap")
	var stdout, stderr bytes.Buffer
	if code := run([]string{"snapshot", "save", path, "--servers", followerAddr}, &stdout, &stderr); code != 0 {
		t.Fatalf("save: exit %d: %s", code, stderr.String())
	}
	want := "saved a snapshot of 31 bytes from " + followerAddr + " to " + path + "\n"
	if stdout.String() != want {
		t.Errorf("save printed %q, want %q", stdout.String(), want)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "snapshot-part-1;snapshot-part-2" {
		t.Errorf("saved %q, %v", got, err)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("temporary files left behind: %v", entries)
	}

	// A failed save leaves nothing, not even a partial file.
	follower.setErr(status.Error(codes.Unavailable, "no snapshot available"))
	failed := filepath.Join(dir, "failed.snap")
	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"snapshot", "save", failed, "--servers", followerAddr}, &stdout, &stderr); code != 1 ||
		stderr.String() != "rationctl snapshot save: Unavailable: no snapshot available\n" {
		t.Errorf("failed save: exit %d, stderr:\n%s", code, stderr.String())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("failed save left files: %v", entries)
	}
	follower.setErr(nil)

	stdout.Reset()
	stderr.Reset()
	if code := run([]string{"snapshot", "restore", path, "--servers", followerAddr}, &stdout, &stderr); code != 0 {
		t.Fatalf("restore: exit %d: %s", code, stderr.String())
	}
	if want := "restored " + path + " (31 bytes) on leader node2; applied index 99\n"; stdout.String() != want {
		t.Errorf("restore printed %q, want %q", stdout.String(), want)
	}
	leader.mu.Lock()
	restored := string(leader.restored)
	leader.mu.Unlock()
	if restored != "snapshot-part-1;snapshot-part-2" {
		t.Errorf("the leader received %q", restored)
	}
	follower.mu.Lock()
	defer follower.mu.Unlock()
	if follower.restored != nil {
		t.Error("the restore went to the follower")
	}
}

// TestAdminHelp: every command is listed, and each verb has usage.
func TestAdminHelp(t *testing.T) {
	var stdout, stderr bytes.Buffer
	if code := run([]string{"help"}, &stdout, &stderr); code != 0 {
		t.Fatalf("exit %d", code)
	}
	for _, w := range []string{"simulate", "status", "members", "policy       apply -f FILE [--prune] | diff -f FILE | import --envoy FILE | get NAME | list | delete NAME",
		"leases", "snapshot     save FILE | restore FILE", "leader       transfer [ID]", "server       remove ID", "RATION_SERVERS"} {
		if !strings.Contains(stdout.String(), w) {
			t.Errorf("help does not list %q:\n%s", w, stdout.String())
		}
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"help", "policy"}, "rationctl policy apply -f FILE"},
		{[]string{"policy", "-h"}, "rationctl policy delete NAME"},
		{[]string{"policy", "apply", "-h"}, "-f FILE"},
		{[]string{"leases", "--help"}, "-policy P"},
		{[]string{"status", "-h"}, "-json"},
		{[]string{"snapshot", "save", "-h"}, "renamed once everything arrived"},
		{[]string{"help", "server"}, "rationctl server remove ID"},
	} {
		stdout.Reset()
		if code := run(c.args, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), c.want) {
			t.Errorf("%v: exit %d, stdout:\n%s\nwant %q", c.args, code, stdout.String(), c.want)
		}
	}
}

// TestLeaderTransferUnknownYet: when the old leader answers before it
// knows its successor, rationctl asks Status for the new leader.
func TestLeaderTransferUnknownYet(t *testing.T) {
	f := cannedCluster()
	f.newLeader = ""
	addr := serve(t, f)
	var stdout, stderr bytes.Buffer
	if code := run([]string{"leader", "transfer", "--servers", addr}, &stdout, &stderr); code != 0 ||
		stdout.String() != "leadership transferred to node2\n" {
		t.Errorf("exit %d, stdout %q, stderr:\n%s", code, stdout.String(), stderr.String())
	}
}
