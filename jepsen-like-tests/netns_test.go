//go:build jepsen && linux

package jepsen

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// blockedDial is how long a dial may take before we call the peer unreachable. Between
// namespaces on one bridge a working dial takes well under a millisecond.
const blockedDial = 300 * time.Millisecond

var testNetSeq atomic.Int32

// newTestNet creates a Net with a prefix unique to this process and test, closed on cleanup.
func newTestNet(t *testing.T, names ...string) *Net {
	t.Helper()
	requireRoot(t)
	n, err := NewNet(testPrefix(), names)
	if err != nil {
		t.Fatalf("NewNet: %v", err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return n
}

// testPrefix returns "t" and three hex digits from the PID and a sequence number.
func testPrefix() string {
	return fmt.Sprintf("t%03x", (os.Getpid()*16+int(testNetSeq.Add(1)))%0x1000)
}

func requireRoot(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatal("network namespace tests need root")
	}
}

// inNS runs fn on an OS thread that has entered namespace ns, then brings the thread back.
// Sockets created by fn stay in ns for their lifetime, wherever they are used later. fn must
// not hand work to other goroutines that expect to be in ns.
func inNS(ns string, fn func() error) error {
	runtime.LockOSThread()
	orig, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer orig.Close()
	target, err := os.Open("/run/netns/" + ns)
	if err != nil {
		runtime.UnlockOSThread()
		return err
	}
	defer target.Close()
	if err := setns(target.Fd()); err != nil {
		runtime.UnlockOSThread()
		return fmt.Errorf("setns %s: %w", ns, err)
	}
	defer func() {
		if err := setns(orig.Fd()); err != nil {
			// Keep the thread locked: it ends with the goroutine instead of serving others
			// from the wrong namespace.
			panic(fmt.Sprintf("setns back from %s: %v", ns, err))
		}
		runtime.UnlockOSThread()
	}()
	return fn()
}

func setns(fd uintptr) error { return unix.Setns(int(fd), unix.CLONE_NEWNET) }

// echoIn starts a TCP echo server on host's address inside its namespace and returns its
// address.
func echoIn(t *testing.T, n *Net, host string) string {
	t.Helper()
	h, ok := n.Host(host)
	if !ok {
		t.Fatalf("no host %q", host)
	}
	var ln net.Listener
	if err := inNS(h.NS, func() (err error) {
		ln, err = net.Listen("tcp4", h.IP+":0")
		return err
	}); err != nil {
		t.Fatalf("listen in %s: %v", host, err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// dialFrom dials addr from host's namespace, or from the root namespace if host is "".
func dialFrom(n *Net, host, addr string) (net.Conn, error) {
	d := net.Dialer{Timeout: blockedDial}
	if host == "" {
		return d.Dial("tcp4", addr)
	}
	h, ok := n.Host(host)
	if !ok {
		return nil, fmt.Errorf("no host %q", host)
	}
	var c net.Conn
	err := inNS(h.NS, func() (err error) {
		c, err = d.Dial("tcp4", addr)
		return err
	})
	return c, err
}

// reachable reports whether a TCP connection from host ("" = harness) to addr opens and
// echoes a byte.
func reachable(n *Net, host, addr string) error {
	c, err := dialFrom(n, host, addr)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(blockedDial))
	if _, err := c.Write([]byte{'x'}); err != nil {
		return err
	}
	_, err = io.ReadFull(c, make([]byte, 1))
	return err
}

func expectReach(t *testing.T, n *Net, from, addr string) {
	t.Helper()
	if err := reachable(n, from, addr); err != nil {
		t.Errorf("from %q to %s: want reachable, got %v", from, addr, err)
	}
}

func expectCut(t *testing.T, n *Net, from, addr string) {
	t.Helper()
	err := reachable(n, from, addr)
	var ne net.Error
	if err == nil || !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("from %q to %s: want a timeout (packets dropped), got %v", from, addr, err)
	}
}

// waitFor polls cond until it returns nil or the deadline passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() error) {
	t.Helper()
	if err := pollUntil(within, cond); err != nil {
		t.Fatalf("%s: not within %v: %v", what, within, err)
	}
}

func TestNetHostsAndAddresses(t *testing.T) {
	n := newTestNet(t, "a", "b", "c")
	hosts := n.Hosts()
	if len(hosts) != 3 {
		t.Fatalf("Hosts: %v", hosts)
	}
	base := strings.TrimSuffix(n.Subnet(), "0/24")
	if !strings.HasPrefix(n.Subnet(), "10.") || !strings.HasSuffix(n.Subnet(), ".0.0/24") {
		t.Errorf("Subnet %s: want 10.X.0.0/24", n.Subnet())
	}
	if n.HarnessIP() != base+"1" {
		t.Errorf("HarnessIP %s in %s", n.HarnessIP(), n.Subnet())
	}
	for i, name := range []string{"a", "b", "c"} {
		h, ok := n.Host(name)
		if !ok || h != hosts[i] || h.Name != name || h.IP != fmt.Sprintf("%s%d", base, 11+i) {
			t.Errorf("Host(%q) = %+v, %v; Hosts()[%d] = %+v", name, h, ok, i, hosts[i])
		}
		if !strings.HasPrefix(h.NS, "rj") {
			t.Errorf("namespace %q does not start with rj", h.NS)
		}
	}
	if h, ok := n.Host("zz"); ok || h != (Host{}) {
		t.Errorf("Host(unknown) = %+v, %v", h, ok)
	}
	if _, err := n.Command("zz", "true"); err == nil {
		t.Error("Command on an unknown host: want an error")
	}
}

func TestNetBlock(t *testing.T) {
	n := newTestNet(t, "a", "b", "c")
	toA := echoIn(t, n, "a")
	toB := echoIn(t, n, "b")
	expectReach(t, n, "b", toA)
	expectReach(t, n, "c", toA)
	expectReach(t, n, "", toA)
	expectReach(t, n, "a", toB)

	// A connection opened before the partition stalls during it and recovers after.
	before, err := dialFrom(n, "b", toA)
	if err != nil {
		t.Fatal(err)
	}
	defer before.Close()

	for range 2 { // idempotent
		if err := n.Block([][2]string{{"a", "b"}}); err != nil {
			t.Fatalf("Block: %v", err)
		}
	}
	expectCut(t, n, "b", toA)
	expectCut(t, n, "a", toB)
	expectReach(t, n, "c", toA)
	expectReach(t, n, "c", toB)
	expectReach(t, n, "", toA) // the harness is never cut
	expectReach(t, n, "", toB)

	before.SetDeadline(time.Now().Add(blockedDial))
	if _, err := before.Write([]byte{'y'}); err != nil {
		t.Fatalf("write during partition: %v", err)
	}
	if _, err := io.ReadFull(before, make([]byte, 1)); err == nil {
		t.Error("established connection: echo arrived through the partition")
	}

	if err := n.Block(nil); err != nil {
		t.Fatalf("Block(nil): %v", err)
	}
	expectReach(t, n, "b", toA)
	expectReach(t, n, "a", toB)
	// The stalled byte is retransmitted; TCP backoff decides when.
	before.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.ReadFull(before, make([]byte, 1)); err != nil {
		t.Errorf("established connection after heal: %v", err)
	}

	// Replacing the set: {a,c} blocked, {a,b} open again.
	if err := n.Block([][2]string{{"c", "a"}}); err != nil {
		t.Fatal(err)
	}
	expectCut(t, n, "c", toA)
	expectReach(t, n, "b", toA)
	if err := n.HealAll(); err != nil {
		t.Fatal(err)
	}
	expectReach(t, n, "c", toA)
	if len(n.Blocked()) != 0 {
		t.Errorf("Blocked after HealAll: %v", n.Blocked())
	}

	for _, bad := range [][][2]string{{{"a", "zz"}}, {{"a", "a"}}} {
		if err := n.Block(bad); err == nil {
			t.Errorf("Block(%v): want an error", bad)
		}
	}
}

func TestNetTopologyIsolate(t *testing.T) {
	n := newTestNet(t, "a", "b", "c")
	addr := map[string]string{}
	for _, h := range []string{"a", "b", "c"} {
		addr[h] = echoIn(t, n, h)
	}
	if err := n.Block(Isolate("b", []string{"a", "b", "c"})); err != nil {
		t.Fatal(err)
	}
	expectCut(t, n, "a", addr["b"])
	expectCut(t, n, "b", addr["c"])
	expectReach(t, n, "a", addr["c"])
	expectReach(t, n, "", addr["b"])
}

func TestNetNetem(t *testing.T) {
	n := newTestNet(t, "a", "b")
	for _, bad := range []struct {
		d, j time.Duration
		loss float64
	}{{-1, 0, 0}, {0, time.Millisecond, 0}, {0, 0, 101}} {
		if err := n.Netem("a", bad.d, bad.j, bad.loss); err == nil {
			t.Errorf("Netem(%v, %v, %v): want an error", bad.d, bad.j, bad.loss)
		}
	}
	if err := n.Netem("zz", 0, 0, 0); err == nil {
		t.Error("Netem on an unknown host: want an error")
	}
	if err := n.Netem("a", 0, 0, 0); err != nil { // clearing what was never set is fine
		t.Errorf("Netem clear: %v", err)
	}

	toA := echoIn(t, n, "a")
	h, _ := n.Host("a")
	connectTime := func() (time.Duration, error) {
		start := time.Now()
		c, err := net.DialTimeout("tcp4", toA, 2*time.Second)
		if err != nil {
			return 0, err
		}
		c.Close()
		return time.Since(start), nil
	}

	const delay = 100 * time.Millisecond
	err := n.Netem("a", delay, 5*time.Millisecond, 0)
	if errors.Is(err, ErrNetemUnsupported) {
		t.Skipf("kernel without netem: %v", err)
	}
	if err != nil {
		t.Fatalf("Netem: %v", err)
	}
	out, err := exec.Command("tc", "-n", h.NS, "qdisc", "show", "dev", "eth0").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "netem") {
		t.Fatalf("tc qdisc show: %v %s", err, out)
	}
	// The SYN-ACK leaves a through its delayed egress.
	if rtt, err := connectTime(); err != nil || rtt < delay-10*time.Millisecond {
		t.Errorf("connect with %v delay took %v (%v)", delay, rtt, err)
	}

	if err := n.Netem("a", 0, 0, 0); err != nil {
		t.Fatalf("Netem clear: %v", err)
	}
	if rtt, err := connectTime(); err != nil || rtt >= delay/2 {
		t.Errorf("connect after clearing took %v (%v)", rtt, err)
	}

	if err := n.Netem("a", 0, 0, 100); err != nil {
		t.Fatal(err)
	}
	expectCut(t, n, "", toA)
	if err := n.HealAll(); err != nil {
		t.Fatal(err)
	}
	expectReach(t, n, "", toA)
	expectReach(t, n, "b", toA)
}

// procState returns the state letter of /proc/<pid>/stat ('S', 'T', ...).
func procState(pid int) (byte, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// "pid (comm) S ...": comm may contain spaces, so cut after the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0, fmt.Errorf("odd stat %q", s)
	}
	return s[i+2], nil
}

func TestNetCommandSignalsReachProgram(t *testing.T) {
	n := newTestNet(t, "a")
	h, _ := n.Host("a")
	cmd, err := n.Command("a", "sleep", "60")
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pid := cmd.Process.Pid
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})

	// ip netns exec setns()es and then execs: same PID, new program.
	waitFor(t, 5*time.Second, "process becomes sleep", func() error {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil {
			return err
		}
		if got := strings.TrimSpace(string(comm)); got != "sleep" {
			return fmt.Errorf("comm %q", got)
		}
		return nil
	})
	var procNS, wantNS syscall.Stat_t
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/ns/net", pid), &procNS); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat("/run/netns/"+h.NS, &wantNS); err != nil {
		t.Fatal(err)
	}
	if procNS.Ino != wantNS.Ino {
		t.Errorf("process in netns inode %d, want %s's %d", procNS.Ino, h.NS, wantNS.Ino)
	}

	state := func(want byte) func() error {
		return func() error {
			got, err := procState(pid)
			if err == nil && got != want {
				err = fmt.Errorf("state %c", got)
			}
			return err
		}
	}
	if err := cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "SIGSTOP stops sleep", state('T'))
	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 5*time.Second, "SIGCONT resumes sleep", state('S'))
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	err = cmd.Wait()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Errorf("Wait after SIGKILL: %v", err)
	}
}

func TestNetCommandKeepsEnvironmentAndNetwork(t *testing.T) {
	n := newTestNet(t, "a")
	t.Setenv("RJ_TEST_ENV", "kept")
	cmd, err := n.Command("a", "printenv", "RJ_TEST_ENV")
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.Output()
	if err != nil || strings.TrimSpace(string(out)) != "kept" {
		t.Errorf("printenv in namespace: %q, %v", out, err)
	}

	h, _ := n.Host("a")
	cmd, _ = n.Command("a", "ip", "-o", "-4", "addr", "show")
	out, err = cmd.Output()
	if err != nil || !strings.Contains(string(out), h.IP+"/24") || !strings.Contains(string(out), "lo ") {
		t.Errorf("addresses in namespace: %s, %v", out, err)
	}
}

func TestNetAddHost(t *testing.T) {
	n := newTestNet(t, "a", "b", "c")
	d, err := n.AddHost("d")
	if err != nil {
		t.Fatalf("AddHost: %v", err)
	}
	if want := strings.TrimSuffix(n.Subnet(), "0/24") + "14"; d.IP != want {
		t.Errorf("AddHost IP %s, want %s", d.IP, want)
	}
	if got, ok := n.Host("d"); !ok || got != d || len(n.Hosts()) != 4 {
		t.Errorf("Host(d) = %+v, %v; Hosts %v", got, ok, n.Hosts())
	}
	toD := echoIn(t, n, "d")
	expectReach(t, n, "a", toD)
	expectReach(t, n, "", toD)
	if err := n.Block(Isolate("d", []string{"a", "b", "c", "d"})); err != nil {
		t.Fatal(err)
	}
	expectCut(t, n, "a", toD)
	expectReach(t, n, "", toD)
	if _, err := n.AddHost("d"); err == nil {
		t.Error("AddHost twice: want an error")
	}
	if _, err := n.AddHost("bad name"); err == nil {
		t.Error("AddHost with a bad name: want an error")
	}
}

// leftovers lists namespaces and root links whose names start with prefix.
func leftovers(t *testing.T, prefix string) []string {
	t.Helper()
	var found []string
	out, err := exec.Command("ip", "netns", "list").Output()
	if err != nil {
		t.Fatalf("ip netns list: %v", err)
	}
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 0 && strings.HasPrefix(f[0], prefix) {
			found = append(found, "netns "+f[0])
		}
	}
	out, err = exec.Command("ip", "-o", "link", "show").Output()
	if err != nil {
		t.Fatalf("ip link: %v", err)
	}
	sc = bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) > 1 && strings.HasPrefix(f[1], prefix) {
			found = append(found, "link "+f[1])
		}
	}
	return found
}

func TestNetCloseRemovesEverything(t *testing.T) {
	requireRoot(t)
	prefix := testPrefix()
	n, err := NewNet(prefix, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	if _, err := n.AddHost("c"); err != nil {
		t.Fatal(err)
	}
	if got := leftovers(t, "rj"+prefix); len(got) != 5 { // a, b, c, hub, gateway link
		t.Errorf("live Net: %v", got)
	}
	for range 2 {
		if err := n.Close(); err != nil {
			t.Fatalf("Close: %v", err)
		}
	}
	if got := leftovers(t, "rj"+prefix); len(got) != 0 {
		t.Errorf("after Close: %v", got)
	}
	if err := n.Block(nil); err == nil {
		t.Error("Block after Close: want an error")
	}
}

func TestNetNewFailureCleansUp(t *testing.T) {
	requireRoot(t)
	if _, err := NewNet("TOO-LONG", []string{"a"}); err == nil {
		t.Error("bad prefix: want an error")
	}
	if _, err := NewNet("ok", []string{"a", "a"}); err == nil {
		t.Error("duplicate names: want an error")
	}

	prefix := testPrefix()
	// Someone else's namespace in the way of host b.
	squatter := "rj" + prefix + "-b"
	if out, err := exec.Command("ip", "netns", "add", squatter).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { exec.Command("ip", "netns", "del", squatter).Run() })

	n, err := NewNet(prefix, []string{"a", "b"})
	if err == nil {
		n.Close()
		t.Fatal("NewNet over an existing namespace: want an error")
	}
	if !strings.Contains(err.Error(), "netns add "+squatter) {
		t.Errorf("error does not name the command: %v", err)
	}
	got := leftovers(t, "rj"+prefix)
	if len(got) != 1 || got[0] != "netns "+squatter {
		t.Errorf("after failed NewNet: %v, want only the squatter", got)
	}
}

func TestSweep(t *testing.T) {
	requireRoot(t)
	prefix := testPrefix()
	n, err := NewNet(prefix, []string{"a", "b"})
	if err != nil {
		t.Fatal(err)
	}
	// Simulate a crashed run: the Net is never closed, its owner is dead, and stray objects
	// lie around.
	t.Cleanup(func() { n.Close() })
	setOwner(t, prefix, deadPID(t))
	for _, argv := range [][]string{
		{"ip", "netns", "add", "rj" + prefix + "-stray"},
		{"ip", "link", "add", "rj" + prefix + "x0", "type", "veth", "peer", "name", "rj" + prefix + "x1"},
	} {
		if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
			t.Fatalf("%v: %v %s", argv, err, out)
		}
	}
	if got := leftovers(t, "rj"+prefix); len(got) != 7 {
		t.Fatalf("before Sweep: %v", got)
	}
	if err := Sweep(); err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if got := leftovers(t, "rj"+prefix); len(got) != 0 {
		t.Errorf("after Sweep: %v", got)
	}
	if err := Sweep(); err != nil {
		t.Errorf("Sweep with nothing to do: %v", err)
	}
}

func TestNetTwoNetsCoexist(t *testing.T) {
	n1 := newTestNet(t, "a", "b")
	n2 := newTestNet(t, "a", "b")
	if n1.Subnet() == n2.Subnet() {
		t.Fatalf("both Nets on %s", n1.Subnet())
	}
	to1, to2 := echoIn(t, n1, "a"), echoIn(t, n2, "a")
	if err := n1.Block([][2]string{{"a", "b"}}); err != nil {
		t.Fatal(err)
	}
	expectCut(t, n1, "b", to1)
	expectReach(t, n2, "b", to2)
	expectReach(t, n1, "", to1)
	expectReach(t, n2, "", to2)
}

func TestNetLoss(t *testing.T) {
	n := newTestNet(t, "a", "b")
	if err := n.Loss("a", 100); err != nil {
		t.Fatal(err)
	}
	if err := n.Loss("zz", 1); err == nil {
		t.Fatal("Loss accepted an unknown host")
	}
	if err := n.Loss("a", 101); err == nil {
		t.Fatal("Loss accepted 101%")
	}
	out, err := run(nil, "ip", "netns", "exec", hostNS(t, n, "a"), "iptables", "-S", blockChain)
	if err != nil || !strings.Contains(out, "statistic") {
		t.Fatalf("no statistic rule in host a's chain: %v\n%s", err, out)
	}
	if err := n.HealAll(); err != nil {
		t.Fatal(err)
	}
	out, _ = run(nil, "ip", "netns", "exec", hostNS(t, n, "a"), "iptables", "-S", blockChain)
	if strings.Contains(out, "statistic") {
		t.Fatalf("HealAll left the loss rule:\n%s", out)
	}
}

func hostNS(t *testing.T, n *Net, name string) string {
	t.Helper()
	h, ok := n.Host(name)
	if !ok {
		t.Fatalf("no host %q", name)
	}
	return h.NS
}

// deadPID is the PID of a process that has exited (and been reaped).
func deadPID(t *testing.T) int {
	t.Helper()
	cmd := exec.Command("true")
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	return cmd.Process.Pid
}

func setOwner(t *testing.T, prefix string, pid int) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(ownerDir(), prefix), []byte(strconv.Itoa(pid)), 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestSweepSparesLiveNets: Sweep (which every run of this package starts
// with) leaves alone a Net whose owner process is alive, here this one and
// then another live process, while it removes strays of the same prefix
// that are not the Net's; and NewNet refuses a prefix a live process
// owns. (A second go test of this package, started while a suite ran,
// once deleted that suite's namespaces from under it.)
func TestSweepSparesLiveNets(t *testing.T) {
	requireRoot(t)
	prefix := testPrefix()
	n, err := NewNet(prefix, []string{"a"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	if out, err := exec.Command("ip", "link", "add", "rj"+prefix+"x0", "type", "veth", "peer", "name", "rj"+prefix+"x1").CombinedOutput(); err != nil {
		t.Fatalf("%v %s", err, out)
	}
	before := leftovers(t, "rj"+prefix)
	if err := Sweep(); err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	got := leftovers(t, "rj"+prefix)
	if len(got) != len(before)-2 {
		t.Fatalf("Sweep with this process alive: %v left of %v; want all but the two strays", got, before)
	}
	other := exec.Command("sleep", "60")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { other.Process.Kill(); other.Wait() })
	setOwner(t, prefix, other.Process.Pid)
	if err := Sweep(); err != nil {
		t.Fatalf("Sweep: %v", err)
	}
	if again := leftovers(t, "rj"+prefix); len(again) != len(got) {
		t.Fatalf("Sweep with another live owner: %v left of %v", again, got)
	}
	if _, err := NewNet(prefix, []string{"b"}); err == nil || !strings.Contains(err.Error(), "in use by process") {
		t.Fatalf("NewNet on a prefix a live process owns: %v", err)
	}
	if again := leftovers(t, "rj"+prefix); len(again) != len(got) {
		t.Fatalf("the refused NewNet changed the network: %v left of %v", again, got)
	}
	setOwner(t, prefix, os.Getpid())
}
