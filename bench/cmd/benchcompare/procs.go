package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/ration-dev/ration/api"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// This file starts and stops what the benchmark runs against: three
// rationd processes and one redis-server, all on loopback ports picked
// free at start, with their state in a temporary directory. Everything
// started here is stopped by stopAll (also on Ctrl-C).

// freePort returns a loopback TCP port that was free a moment ago.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// node is one rationd process.
type node struct {
	id                         string
	grpcAddr, raftAddr, gossip string
	dataDir, logPath           string
	cmd                        *exec.Cmd
	done                       chan struct{}
}

// cluster is a three-node rationd cluster of real processes.
type cluster struct {
	bin   string // the directory holding rationd
	nodes []*node
	conns map[string]*grpc.ClientConn
}

func startCluster(binDir, workDir string, n int) (*cluster, error) {
	c := &cluster{bin: binDir, conns: map[string]*grpc.ClientConn{}}
	for i := 1; i <= n; i++ {
		var ports [3]int
		for k := range ports {
			p, err := freePort()
			if err != nil {
				return nil, err
			}
			ports[k] = p
		}
		c.nodes = append(c.nodes, &node{
			id:       fmt.Sprintf("node%d", i),
			grpcAddr: fmt.Sprintf("127.0.0.1:%d", ports[0]),
			raftAddr: fmt.Sprintf("127.0.0.1:%d", ports[1]),
			gossip:   fmt.Sprintf("127.0.0.1:%d", ports[2]),
			dataDir:  filepath.Join(workDir, "rationd", fmt.Sprintf("node%d", i)),
			logPath:  filepath.Join(workDir, "rationd", fmt.Sprintf("node%d.log", i)),
		})
	}
	for _, nd := range c.nodes {
		if err := c.start(nd); err != nil {
			c.stop()
			return nil, err
		}
	}
	if _, err := c.waitLeader(60 * time.Second); err != nil {
		c.stop()
		return nil, err
	}
	return c, nil
}

func (c *cluster) start(nd *node) error {
	if err := os.MkdirAll(nd.dataDir, 0o700); err != nil {
		return err
	}
	var join []string
	for _, o := range c.nodes {
		if o != nd {
			join = append(join, o.gossip)
		}
	}
	logf, err := os.OpenFile(nd.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(c.bin, "rationd"), "--id", nd.id, "--data-dir", nd.dataDir,
		"--grpc-addr", nd.grpcAddr, "--raft-addr", nd.raftAddr, "--gossip-addr", nd.gossip,
		"--join", strings.Join(join, ","), "--bootstrap-expect", strconv.Itoa(len(c.nodes)), "--log-level", "warn",
		// The fleet section multiplexes up to 1,000 simulated clients over
		// one connection per server: the per-connection lease limit is
		// for real clients (docs/operations.md, "Lease API limits").
		"--lease-conn-rps", "0")
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true} // a Ctrl-C meant for us is handled by stopAll
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	nd.cmd, nd.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(nd.done) }()
	return nil
}

func (c *cluster) servers() []string {
	var out []string
	for _, nd := range c.nodes {
		out = append(out, nd.grpcAddr)
	}
	return out
}

func (c *cluster) conn(addr string) (*grpc.ClientConn, error) {
	if cc, ok := c.conns[addr]; ok {
		return cc, nil
	}
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, err
	}
	c.conns[addr] = cc
	return cc, nil
}

func (c *cluster) alive(nd *node) bool {
	if nd.cmd == nil {
		return false
	}
	select {
	case <-nd.done:
		return false
	default:
		return true
	}
}

// status asks the live nodes in turn.
func (c *cluster) status(ctx context.Context) (*api.StatusResponse, error) {
	var last error = errors.New("no live node")
	for _, nd := range c.nodes {
		if !c.alive(nd) {
			continue
		}
		cc, err := c.conn(nd.grpcAddr)
		if err != nil {
			return nil, err
		}
		cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := api.NewAdminClient(cc).Status(cctx, &api.StatusRequest{})
		cancel()
		if err == nil {
			return st, nil
		}
		last = err
	}
	return nil, last
}

// waitLeader waits for a leader that is one of the live nodes, and returns it.
func (c *cluster) waitLeader(timeout time.Duration) (*node, error) {
	deadline := time.Now().Add(timeout)
	for {
		st, err := c.status(context.Background())
		if err == nil && st.GetLeader() != "" {
			for _, nd := range c.nodes {
				if nd.id == st.GetLeader() && c.alive(nd) {
					return nd, nil
				}
			}
		}
		for _, nd := range c.nodes {
			if nd.cmd != nil && !c.alive(nd) && nd.cmd.ProcessState != nil && nd.cmd.ProcessState.ExitCode() > 0 {
				return nil, fmt.Errorf("%s exited (%v); see %s", nd.id, nd.cmd.ProcessState, nd.logPath)
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no leader after %v (last: %w)", timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func (c *cluster) admin() (api.AdminClient, error) {
	for _, nd := range c.nodes {
		if c.alive(nd) {
			cc, err := c.conn(nd.grpcAddr)
			if err != nil {
				return nil, err
			}
			return api.NewAdminClient(cc), nil
		}
	}
	return nil, errors.New("no live node")
}

func (c *cluster) applyPolicies(yaml string) error {
	a, err := c.admin()
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = a.ApplyPolicies(ctx, &api.ApplyPoliciesRequest{Yaml: yaml})
	return err
}

func (c *cluster) pids() []int {
	var out []int
	for _, nd := range c.nodes {
		if c.alive(nd) {
			out = append(out, nd.cmd.Process.Pid)
		}
	}
	return out
}

// kill sends SIGKILL to nd and waits for it to go.
func (c *cluster) kill(nd *node) {
	if !c.alive(nd) {
		return
	}
	_ = nd.cmd.Process.Signal(syscall.SIGKILL)
	<-nd.done
}

// stop sends SIGTERM to every live node, then SIGKILL after 20s.
func (c *cluster) stop() {
	for _, cc := range c.conns {
		cc.Close()
	}
	c.conns = map[string]*grpc.ClientConn{}
	for _, nd := range c.nodes {
		if c.alive(nd) {
			_ = nd.cmd.Process.Signal(syscall.SIGTERM)
		}
	}
	deadline := time.After(20 * time.Second)
	for _, nd := range c.nodes {
		if nd.cmd == nil {
			continue
		}
		select {
		case <-nd.done:
		case <-deadline:
			c.kill(nd)
		}
	}
}

// redisServer is one redis-server process, no persistence.
type redisServer struct {
	bin, addr string
	port      int
	logPath   string
	cmd       *exec.Cmd
	done      chan struct{}
}

func startRedis(bin, workDir string) (*redisServer, error) {
	p, err := freePort()
	if err != nil {
		return nil, err
	}
	r := &redisServer{bin: bin, port: p, addr: fmt.Sprintf("127.0.0.1:%d", p), logPath: filepath.Join(workDir, "redis.log")}
	return r, r.start()
}

func (r *redisServer) start() error {
	logf, err := os.OpenFile(r.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(r.bin, "--bind", "127.0.0.1", "--port", strconv.Itoa(r.port), "--save", "", "--appendonly", "no",
		"--daemonize", "no", "--protected-mode", "yes", "--dir", filepath.Dir(r.logPath))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		logf.Close()
		return err
	}
	r.cmd, r.done = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); logf.Close(); close(r.done) }()
	deadline := time.Now().Add(10 * time.Second)
	for {
		conn, err := net.DialTimeout("tcp", r.addr, 200*time.Millisecond)
		if err == nil {
			conn.Close()
			return nil
		}
		select {
		case <-r.done:
			return fmt.Errorf("redis-server exited; see %s", r.logPath)
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("redis-server not listening on %s after 10s", r.addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (r *redisServer) alive() bool {
	if r == nil || r.cmd == nil {
		return false
	}
	select {
	case <-r.done:
		return false
	default:
		return true
	}
}

func (r *redisServer) pid() int {
	if !r.alive() {
		return 0
	}
	return r.cmd.Process.Pid
}

// kill sends SIGKILL and waits.
func (r *redisServer) kill() {
	if r.alive() {
		_ = r.cmd.Process.Signal(syscall.SIGKILL)
		<-r.done
	}
}

func (r *redisServer) stop() {
	if r.alive() {
		_ = r.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			r.kill()
		}
	}
}

// procStat is what /proc says about one process.
type procStat struct {
	cpuSeconds float64 // utime + stime
	rssBytes   int64   // VmRSS
	hwmBytes   int64   // VmHWM, the peak RSS
}

// clockTicks is USER_HZ; 100 on every Linux this runs on.
const clockTicks = 100

func readProc(pid int) (procStat, error) {
	var ps procStat
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return ps, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	ps.cpuSeconds = (ut + st) / clockTicks
	b, err = os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return ps, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		switch k {
		case "VmRSS":
			ps.rssBytes = kb << 10
		case "VmHWM":
			ps.hwmBytes = kb << 10
		}
	}
	return ps, nil
}

// cpuOf sums the CPU seconds of pids (0 for any that is gone).
func cpuOf(pids ...int) float64 {
	var s float64
	for _, p := range pids {
		if p == 0 {
			continue
		}
		if ps, err := readProc(p); err == nil {
			s += ps.cpuSeconds
		}
	}
	return s
}

// selfCPU is this process's CPU seconds so far.
func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
}
