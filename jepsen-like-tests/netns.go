//go:build jepsen && linux

package jepsen

// The fault network.
//
// DESIGN. Every host (server or client replica) is its own network namespace with one
// interface, eth0, holding 10.X.0.N/24. The hosts hang off a Linux bridge that lives in a
// namespace of its own (the hub), not in the root namespace: with br_netfilter loaded and
// bridge-nf-call-iptables=1 (any machine running Docker), bridged frames traverse the root
// namespace's iptables FORWARD chain, whose policy Docker sets to DROP, so a bridge in the
// root namespace would silently drop host-to-host traffic unless we edited the machine's
// firewall. The hub namespace has an empty firewall. The root namespace (the test harness)
// joins through one more veth pair, rj<prefix>gw, that carries the .1 address, so the harness
// reaches every host directly and nothing in the root namespace's firewall is touched.
//
// Partitions are iptables DROP rules in a dedicated chain (blockChain) jumped to from INPUT in
// each host's namespace. Blocking {a,b} drops packets from b at a and from a at b, which cuts
// both directions. We deliberately do not drop in OUTPUT: a locally generated packet dropped
// there makes sendmsg fail with EPERM, so a UDP sender (memberlist gossip) would see an
// immediate error instead of the silence a real partition produces. Each namespace's chain is
// replaced in one iptables-restore transaction.
//
// Every name we create starts with "rj" so that Sweep can find leftovers of crashed runs:
// namespaces rj<prefix>-<host> and rj<prefix>.hub, and the root link rj<prefix>gw.

import (
	"bytes"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

const (
	// namePrefix starts every namespace and root-namespace link this file creates.
	namePrefix = "rj"
	// blockChain is the iptables chain in each host's namespace that holds partition rules.
	blockChain = "RJ-BLOCK"
	// hostIface is the name of a host's only non-loopback interface, inside its namespace.
	hostIface = "eth0"
	// firstHostOctet is the last octet of the first host's address; hosts count up from it.
	firstHostOctet = 11
	// subnetBase and subnetCount bound the second octet X of the 10.X.0.0/24 subnets we use.
	subnetBase  = 200
	subnetCount = 50
)

var (
	prefixRE   = regexp.MustCompile(`^[a-z0-9]{1,4}$`)
	hostNameRE = regexp.MustCompile(`^[A-Za-z0-9_-]{1,32}$`)
	// subnetMu serialises choosing a subnet and claiming it (assigning the gateway address),
	// so two Nets created concurrently in one process cannot pick the same one.
	subnetMu sync.Mutex
)

// ErrNetemUnsupported is returned by Netem when the kernel has no netem qdisc
// (CONFIG_NET_SCH_NETEM unset and no sch_netem module), as in some minimal VM kernels.
var ErrNetemUnsupported = errors.New("jepsen: kernel has no tc netem qdisc")

// Host is one machine of a Net: its name, its network namespace and its IPv4 address.
type Host struct {
	Name string // as given to NewNet or AddHost
	NS   string // network namespace name, usable with `ip netns exec`
	IP   string // e.g. "10.213.0.11"
}

// Net is a private IPv4 network of hosts, each its own network namespace, joined by a Linux
// bridge. The root namespace (the test harness) reaches every host through the gateway
// address HarnessIP; that traffic is never blocked. All methods are safe for concurrent use.
type Net struct {
	prefix  string
	subnet  netip.Prefix // 10.X.0.0/24
	hubNS   string
	gwLink  string // root-namespace end of the harness veth
	ipPath  string
	ipt     string // iptables-restore
	tcPath  string
	mu      sync.Mutex
	hosts   []Host
	nextIP  int // last octet for the next host
	blocked [][2]string
	loss    map[string]float64 // host name -> inbound random-drop probability
	netem   map[string]bool    // hosts with a netem qdisc installed
	closed  bool
	// hubCreated and gwCreated record what createHub got to, for cleanup after a failure.
	hubCreated, gwCreated bool
	// owned: this process's owner file for prefix exists (claimPrefix).
	owned bool
}

// NewNet creates one namespace per name, a bridge, and a veth pair per host (eth0 in the
// host's namespace with its address/24 and lo up, the peer on the bridge), and gives the
// harness the .1 address of the subnet so the root namespace reaches every host.
//
// prefix (1-4 chars of [a-z0-9]) makes every namespace and interface name unique to this run.
// The subnet is 10.X.0.0/24 with X in [200,250) derived from a hash of prefix; if that subnet
// overlaps an address or a /16-or-longer route already present in the root namespace, the next
// X is tried. Use Subnet to learn the choice. Hosts get .11, .12, ... in the order of names;
// names must be distinct, 1-32 chars of [A-Za-z0-9_-].
//
// On failure NewNet removes whatever it created and returns an error naming the failed
// command and its output.
func NewNet(prefix string, names []string) (*Net, error) {
	if !prefixRE.MatchString(prefix) {
		return nil, fmt.Errorf("jepsen: net prefix %q: want 1-4 chars of [a-z0-9]", prefix)
	}
	seen := map[string]bool{}
	for _, name := range names {
		if !hostNameRE.MatchString(name) {
			return nil, fmt.Errorf("jepsen: host name %q: want 1-32 chars of [A-Za-z0-9_-]", name)
		}
		if seen[name] {
			return nil, fmt.Errorf("jepsen: host name %q given twice", name)
		}
		seen[name] = true
	}
	n := &Net{
		prefix: prefix,
		hubNS:  namePrefix + prefix + ".hub",
		gwLink: namePrefix + prefix + "gw",
		nextIP: firstHostOctet,
		netem:  map[string]bool{},
	}
	var err error
	if n.ipPath, err = exec.LookPath("ip"); err != nil {
		return nil, fmt.Errorf("jepsen: iproute2 needed: %w", err)
	}
	if n.ipt, err = exec.LookPath("iptables-restore"); err != nil {
		return nil, fmt.Errorf("jepsen: iptables needed: %w", err)
	}
	if n.tcPath, err = exec.LookPath("tc"); err != nil {
		return nil, fmt.Errorf("jepsen: tc (iproute2) needed: %w", err)
	}
	if err := claimPrefix(prefix); err != nil {
		return nil, err
	}
	n.owned = true
	if err := n.createHub(); err != nil {
		n.destroy()
		return nil, err
	}
	for _, name := range names {
		if _, err := n.addHost(name); err != nil {
			n.destroy()
			return nil, err
		}
	}
	return n, nil
}

// createHub creates the hub namespace with its bridge and the harness veth pair, choosing and
// claiming a free subnet.
func (n *Net) createHub() error {
	subnetMu.Lock()
	defer subnetMu.Unlock()
	subnet, err := n.chooseSubnet()
	if err != nil {
		return err
	}
	n.subnet = subnet
	ip := n.ipPath
	steps := [][]string{
		{ip, "netns", "add", n.hubNS},
		{ip, "-n", n.hubNS, "link", "set", "lo", "up"},
		{ip, "-n", n.hubNS, "link", "add", "br0", "type", "bridge"},
		{ip, "-n", n.hubNS, "link", "set", "br0", "up"},
		{ip, "link", "add", n.gwLink, "type", "veth", "peer", "name", "uplink", "netns", n.hubNS},
		{ip, "-n", n.hubNS, "link", "set", "dev", "uplink", "master", "br0", "up"},
		{ip, "addr", "add", n.HarnessIP() + "/24", "dev", n.gwLink},
		{ip, "link", "set", n.gwLink, "up"},
	}
	for i, s := range steps {
		if _, err := run(nil, s...); err != nil {
			return err
		}
		// Record what exists, so that a failure removes only what this Net created.
		switch i {
		case 0:
			n.hubCreated = true
		case 4:
			n.gwCreated = true
		}
	}
	return nil
}

// chooseSubnet picks 10.X.0.0/24, X derived from the prefix, skipping subnets the root
// namespace already uses.
func (n *Net) chooseSubnet() (netip.Prefix, error) {
	used, err := rootPrefixes(n.ipPath)
	if err != nil {
		return netip.Prefix{}, err
	}
	h := fnv.New32a()
	h.Write([]byte(n.prefix))
	start := int(h.Sum32() % subnetCount)
	for i := range subnetCount {
		x := subnetBase + (start+i)%subnetCount
		cand := netip.PrefixFrom(netip.AddrFrom4([4]byte{10, byte(x), 0, 0}), 24)
		free := true
		for _, u := range used {
			if u.Overlaps(cand) {
				free = false
				break
			}
		}
		if free {
			return cand, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("jepsen: no free subnet 10.%d-%d.0.0/24 in the root namespace",
		subnetBase, subnetBase+subnetCount-1)
}

// rootPrefixes lists the root namespace's IPv4 addresses (as /24s around them, so hosts of
// other Nets are covered too) and its routes of /16 or longer. Shorter routes (a VPN's
// 10.0.0.0/8) are ignored: our /24 is more specific and wins locally.
func rootPrefixes(ipPath string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	routes, err := run(nil, ipPath, "-4", "route", "show", "table", "all")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(routes, "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		// The destination is the first field, or the second after a route type ("local").
		for _, dst := range f[:min(2, len(f))] {
			if !strings.Contains(dst, "/") {
				dst += "/32"
			}
			if p, err := netip.ParsePrefix(dst); err == nil {
				if p.Bits() >= 16 {
					out = append(out, p.Masked())
				}
				break
			}
		}
	}
	addrs, err := run(nil, ipPath, "-4", "-o", "addr", "show")
	if err != nil {
		return nil, err
	}
	for _, line := range strings.Split(addrs, "\n") {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] != "inet" {
				continue
			}
			if p, err := netip.ParsePrefix(f[i+1]); err == nil {
				out = append(out, netip.PrefixFrom(p.Addr(), 24).Masked())
			}
		}
	}
	return out, nil
}

// Subnet returns the Net's subnet, e.g. "10.213.0.0/24".
func (n *Net) Subnet() string { return n.subnet.String() }

// HarnessIP returns the root namespace's address on the Net (the .1), from which the harness
// reaches every host. Partitions never block it.
func (n *Net) HarnessIP() string {
	a := n.subnet.Addr().As4()
	a[3] = 1
	return netip.AddrFrom4(a).String()
}

// Hosts returns a copy of the hosts, in the order they were added.
func (n *Net) Hosts() []Host {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([]Host(nil), n.hosts...)
}

// Host returns the host called name, and false if there is none.
func (n *Net) Host(name string) (Host, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.hostLocked(name)
}

func (n *Net) hostLocked(name string) (Host, bool) {
	for _, h := range n.hosts {
		if h.Name == name {
			return h, true
		}
	}
	return Host{}, false
}

// AddHost adds one more host to a live Net (a server joining later). It gets the next address
// and is partitioned from nobody.
func (n *Net) AddHost(name string) (Host, error) {
	if !hostNameRE.MatchString(name) {
		return Host{}, fmt.Errorf("jepsen: host name %q: want 1-32 chars of [A-Za-z0-9_-]", name)
	}
	n.mu.Lock()
	closed := n.closed
	_, dup := n.hostLocked(name)
	n.mu.Unlock()
	if closed {
		return Host{}, errors.New("jepsen: AddHost on a closed Net")
	}
	if dup {
		return Host{}, fmt.Errorf("jepsen: host %q already exists", name)
	}
	return n.addHost(name)
}

func (n *Net) addHost(name string) (Host, error) {
	n.mu.Lock()
	if n.nextIP > 254 {
		n.mu.Unlock()
		return Host{}, errors.New("jepsen: subnet full")
	}
	a := n.subnet.Addr().As4()
	a[3] = byte(n.nextIP)
	port := "h" + strconv.Itoa(n.nextIP) // bridge port in the hub namespace
	n.nextIP++
	h := Host{Name: name, NS: namePrefix + n.prefix + "-" + name, IP: netip.AddrFrom4(a).String()}
	n.mu.Unlock()

	ip := n.ipPath
	steps := [][]string{
		{ip, "netns", "add", h.NS},
		{ip, "-n", h.NS, "link", "set", "lo", "up"},
		{ip, "link", "add", hostIface, "netns", h.NS, "type", "veth", "peer", "name", port, "netns", n.hubNS},
		{ip, "-n", n.hubNS, "link", "set", port, "master", "br0", "up"},
		{ip, "-n", h.NS, "addr", "add", h.IP + "/24", "dev", hostIface},
		{ip, "-n", h.NS, "link", "set", hostIface, "up"},
	}
	for i, s := range steps {
		if _, err := run(nil, s...); err != nil {
			if i > 0 {
				// Deleting the namespace also deletes the veth pair (both ends).
				run(nil, ip, "netns", "del", h.NS)
			}
			return Host{}, err
		}
	}
	setup := "*filter\n:" + blockChain + " - [0:0]\n-I INPUT 1 -j " + blockChain + "\nCOMMIT\n"
	if _, err := run([]byte(setup), ip, "netns", "exec", h.NS, n.ipt, "--noflush"); err != nil {
		run(nil, ip, "netns", "del", h.NS)
		return Host{}, err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed { // Close ran meanwhile and did not know about h
		run(nil, ip, "netns", "del", h.NS)
		return Host{}, errors.New("jepsen: AddHost on a closed Net")
	}
	n.hosts = append(n.hosts, h)
	return h, nil
}

// Command returns a command that runs path with args inside host's namespace, through
// `ip netns exec`, keeping the parent's environment (set cmd.Env to change it). `ip netns
// exec` execs the program in place, so once started cmd.Process.Pid is the program's own PID
// and signals (SIGKILL, SIGSTOP, SIGCONT) sent to cmd.Process reach it directly.
func (n *Net) Command(host string, path string, args ...string) (*exec.Cmd, error) {
	h, ok := n.Host(host)
	if !ok {
		return nil, fmt.Errorf("jepsen: unknown host %q", host)
	}
	return exec.Command(n.ipPath, append([]string{"netns", "exec", h.NS, path}, args...)...), nil
}

// Block replaces the set of blocked host pairs: for each pair {a,b}, packets between a and b
// are dropped in both directions; pairs not listed are open, so Block(nil) heals every
// partition. Traffic between a host and the harness is never blocked. Block is idempotent;
// each host's rules change in one transaction, and every change is in force when it returns.
// Established TCP connections between blocked hosts stall, as in a real partition.
func (n *Net) Block(pairs [][2]string) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return errors.New("jepsen: Block on a closed Net")
	}
	for _, p := range pairs {
		a, okA := n.hostLocked(p[0])
		b, okB := n.hostLocked(p[1])
		if !okA || !okB {
			return fmt.Errorf("jepsen: Block %v: unknown host", p)
		}
		if a.Name == b.Name {
			return fmt.Errorf("jepsen: Block %v: a host cannot be cut from itself", p)
		}
	}
	if err := n.writeRulesLocked(pairs, n.loss); err != nil {
		return err
	}
	n.blocked = append([][2]string(nil), pairs...)
	return nil
}

// writeRulesLocked rewrites every host's chain: drop packets from the hosts
// it is cut from, then drop a random share of the rest (Loss). Each host's
// chain changes in one iptables-restore transaction.
func (n *Net) writeRulesLocked(pairs [][2]string, loss map[string]float64) error {
	drop := map[string][]string{} // host name -> IPs whose packets it drops
	for _, p := range pairs {
		a, _ := n.hostLocked(p[0])
		b, _ := n.hostLocked(p[1])
		drop[a.Name] = append(drop[a.Name], b.IP)
		drop[b.Name] = append(drop[b.Name], a.IP)
	}
	for _, h := range n.hosts {
		var rules strings.Builder
		// In --noflush mode, declaring an existing chain flushes it first.
		rules.WriteString("*filter\n:" + blockChain + " - [0:0]\n")
		ips := map[string]bool{}
		for _, ip := range drop[h.Name] {
			if !ips[ip] {
				ips[ip] = true
				rules.WriteString("-A " + blockChain + " -s " + ip + "/32 -j DROP\n")
			}
		}
		if p := loss[h.Name]; p > 0 {
			// Only traffic from other hosts: the harness's own queries, and
			// a host's own loopback traffic (an edge's sidecar driver),
			// stay exact.
			rules.WriteString("-A " + blockChain + " -i lo -j RETURN\n")
			rules.WriteString("-A " + blockChain + " -s " + n.HarnessIP() + "/32 -j RETURN\n")
			rules.WriteString("-A " + blockChain + " -m statistic --mode random --probability " +
				strconv.FormatFloat(p, 'f', 4, 64) + " -j DROP\n")
		}
		rules.WriteString("COMMIT\n")
		if _, err := run([]byte(rules.String()), n.ipPath, "netns", "exec", h.NS, n.ipt, "--noflush"); err != nil {
			return err
		}
	}
	return nil
}

// Loss makes host drop a random share (percent, 0 to 100) of the packets it
// receives from other hosts, with iptables' statistic match: a degraded
// network that needs no netem (which some VM kernels lack). 0 clears it.
// Partitions set by Block stay in force.
func (n *Net) Loss(host string, percent float64) error {
	if percent < 0 || percent > 100 {
		return fmt.Errorf("jepsen: loss %v%% is out of range", percent)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, ok := n.hostLocked(host); !ok {
		return fmt.Errorf("jepsen: unknown host %q", host)
	}
	loss := maps.Clone(n.loss)
	if loss == nil {
		loss = map[string]float64{}
	}
	if percent == 0 {
		delete(loss, host)
	} else {
		loss[host] = percent / 100
	}
	if err := n.writeRulesLocked(n.blocked, loss); err != nil {
		return err
	}
	n.loss = loss
	return nil
}

// Blocked returns the pairs most recently passed to Block.
func (n *Net) Blocked() [][2]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return append([][2]string(nil), n.blocked...)
}

// Netem sets delay, jitter and loss on the egress of host's interface (tc netem), replacing
// any earlier setting; all zero clears it. Egress only: a delay d adds d to every round trip
// through host, not 2d. Jitter needs a non-zero delay. On a kernel without netem it returns
// an error wrapping ErrNetemUnsupported and changes nothing.
func (n *Net) Netem(host string, delay, jitter time.Duration, lossPercent float64) error {
	if delay < 0 || jitter < 0 || lossPercent < 0 || lossPercent > 100 {
		return fmt.Errorf("jepsen: netem delay %v jitter %v loss %v%%: out of range", delay, jitter, lossPercent)
	}
	if jitter > 0 && delay == 0 {
		return errors.New("jepsen: netem jitter needs a delay")
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	h, ok := n.hostLocked(host)
	if !ok {
		return fmt.Errorf("jepsen: unknown host %q", host)
	}
	return n.netemLocked(h, delay, jitter, lossPercent)
}

func (n *Net) netemLocked(h Host, delay, jitter time.Duration, lossPercent float64) error {
	if delay == 0 && jitter == 0 && lossPercent == 0 {
		if !n.netem[h.Name] {
			return nil
		}
		if _, err := run(nil, n.tcPath, "-n", h.NS, "qdisc", "del", "dev", hostIface, "root"); err != nil {
			return err
		}
		delete(n.netem, h.Name)
		return nil
	}
	args := []string{n.tcPath, "-n", h.NS, "qdisc", "replace", "dev", hostIface, "root", "netem"}
	if delay > 0 {
		args = append(args, "delay", usec(delay))
		if jitter > 0 {
			args = append(args, usec(jitter))
		}
	}
	if lossPercent > 0 {
		args = append(args, "loss", strconv.FormatFloat(lossPercent, 'f', -1, 64)+"%")
	}
	if _, err := run(nil, args...); err != nil {
		// tc's message is the only signal of a missing qdisc; this is the one place we map it.
		if strings.Contains(err.Error(), "qdisc kind is unknown") {
			return fmt.Errorf("%w: %w", ErrNetemUnsupported, err)
		}
		return err
	}
	n.netem[h.Name] = true
	return nil
}

func usec(d time.Duration) string { return strconv.FormatInt(d.Microseconds(), 10) + "us" }

// HealAll lifts every partition and loss (Block(nil)) and clears every
// netem setting.
func (n *Net) HealAll() error {
	n.mu.Lock()
	n.loss = nil
	n.mu.Unlock()
	if err := n.Block(nil); err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var errs []error
	for _, h := range n.hosts {
		errs = append(errs, n.netemLocked(h, 0, 0, 0))
	}
	return errors.Join(errs...)
}

// Close deletes the namespaces, veths and bridge. It is idempotent and kills nothing: stop
// the processes first, for a namespace with a process still in it outlives its name (it is
// then unreachable, since its veth pair goes with the hub).
func (n *Net) Close() error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.closed {
		return nil
	}
	n.closed = true
	return n.destroy()
}

// destroy removes everything the Net may have created, tolerating what is already gone.
// The root link goes first and synchronously: namespace teardown (which would take it along)
// runs asynchronously in the kernel, and the subnet must be free when destroy returns.
func (n *Net) destroy() error {
	var errs []error
	if n.owned {
		defer releasePrefix(n.prefix)
	}
	if n.gwCreated {
		errs = append(errs, delLink(n.ipPath, n.gwLink))
	}
	for _, h := range n.hosts {
		errs = append(errs, delNS(n.ipPath, h.NS))
	}
	if n.hubCreated {
		errs = append(errs, delNS(n.ipPath, n.hubNS))
	}
	return errors.Join(errs...)
}

// ownerDir holds one file per live Net's prefix, naming the process that
// made it, so that Sweep spares the networks of runs still going (another
// go test of this package, or a second checkout's): it deleted a running
// suite's namespaces from under it when a developer started a second one.
func ownerDir() string { return filepath.Join(os.TempDir(), "ration-jepsen-nets") }

// claimPrefix records this process as the owner of prefix's network. A
// prefix another live process owns is refused.
func claimPrefix(prefix string) error {
	if err := os.MkdirAll(ownerDir(), 0o755); err != nil {
		return err
	}
	if pid, ok := prefixOwner(prefix); ok && pid != os.Getpid() {
		return fmt.Errorf("jepsen: net prefix %q is in use by process %d (a run still going)", prefix, pid)
	}
	return os.WriteFile(filepath.Join(ownerDir(), prefix), []byte(strconv.Itoa(os.Getpid())), 0o644)
}

func releasePrefix(prefix string) { os.Remove(filepath.Join(ownerDir(), prefix)) }

// prefixOwner is the live process that owns prefix's network, if any.
func prefixOwner(prefix string) (int, bool) {
	b, err := os.ReadFile(filepath.Join(ownerDir(), prefix))
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return 0, false
	}
	// Signal 0: does the process exist (ESRCH: it does not).
	if err := syscall.Kill(pid, 0); err != nil && !errors.Is(err, syscall.EPERM) {
		return 0, false
	}
	return pid, true
}

// liveOwned: name belongs to a Net whose owner (prefixOwner) is alive.
func liveOwned(name string) bool {
	files, err := os.ReadDir(ownerDir())
	if err != nil {
		return false
	}
	for _, f := range files {
		p := f.Name()
		rest, ok := strings.CutPrefix(name, namePrefix+p)
		if !ok || !(rest == "gw" || rest == ".hub" || strings.HasPrefix(rest, "-")) {
			continue
		}
		if _, live := prefixOwner(p); live {
			return true
		}
	}
	return false
}

// Sweep deletes leftovers of earlier runs that crashed: every namespace and every
// root-namespace link whose name starts with "rj", except those of a Net whose owner process
// is still alive (a run going on in another go test process: ownerDir).
func Sweep() error {
	ip, err := exec.LookPath("ip")
	if err != nil {
		return fmt.Errorf("jepsen: iproute2 needed: %w", err)
	}
	var errs []error
	links, err := run(nil, ip, "-o", "link", "show")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(links, "\n") {
		// "7: rjabgw@if2: <BROADCAST,...> ..."
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimSuffix(f[1], ":"), "@")
		if strings.HasPrefix(name, namePrefix) && !liveOwned(name) {
			errs = append(errs, delLink(ip, name))
		}
	}
	nss, err := run(nil, ip, "netns", "list")
	if err != nil {
		return err
	}
	for _, line := range strings.Split(nss, "\n") {
		// "rjab-n1 (id: 3)"
		f := strings.Fields(line)
		if len(f) > 0 && strings.HasPrefix(f[0], namePrefix) && !liveOwned(f[0]) {
			errs = append(errs, delNS(ip, f[0]))
		}
	}
	return errors.Join(errs...)
}

func delLink(ip, name string) error {
	if _, err := run(nil, ip, "link", "show", "dev", name); err != nil {
		return nil // already gone
	}
	_, err := run(nil, ip, "link", "del", "dev", name)
	return err
}

func delNS(ip, name string) error {
	out, err := run(nil, ip, "netns", "list")
	if err != nil {
		return err
	}
	found := false
	for _, line := range strings.Split(out, "\n") {
		if f := strings.Fields(line); len(f) > 0 && f[0] == name {
			found = true
		}
	}
	if !found {
		return nil
	}
	_, err = run(nil, ip, "netns", "del", name)
	return err
}

// run runs argv with stdin and returns its stdout; the error names the command and carries
// its combined output.
func run(stdin []byte, argv ...string) (string, error) {
	cmd := exec.Command(argv[0], argv[1:]...)
	if stdin != nil {
		cmd.Stdin = bytes.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("jepsen: %s: %w: %s", strings.Join(argv, " "),
			err, strings.TrimSpace(stdout.String()+stderr.String()))
	}
	return stdout.String(), nil
}
