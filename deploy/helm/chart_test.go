// Package helm_test checks the Helm chart in ./ration offline: rendered
// with Helm's own engine for the default values and for
// ration/ci/secure-values.yaml, every object decoded strictly (unknown
// fields refused) into the Kubernetes API types, the alert rules parsed
// by Prometheus' rule parser and compared with docs/operations.md.
// Nothing here talks to a cluster.
package helm_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/prometheus/common/model"
	"github.com/prometheus/prometheus/model/rulefmt"
	"github.com/prometheus/prometheus/promql/parser"
	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	appsv1 "k8s.io/api/apps/v1"
	autoscalingv2 "k8s.io/api/autoscaling/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	chartDir  = "ration"
	release   = "ration"
	namespace = "limits"
	// The servers' stable names' suffix: NAME-headless.NAMESPACE.svc.
	suffix = "ration-headless.limits.svc"
)

// scheme knows every built-in kind the chart may render; anything else
// must be a custom resource the test decodes as unstructured.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{
		appsv1.AddToScheme, corev1.AddToScheme, policyv1.AddToScheme,
		autoscalingv2.AddToScheme, batchv1.AddToScheme, rbacv1.AddToScheme,
	} {
		if err := add(s); err != nil {
			panic(err)
		}
	}
	return s
}()

// customKinds are the custom resources the chart renders, by apiVersion/kind.
var customKinds = map[string]bool{
	"monitoring.coreos.com/v1/ServiceMonitor": true,
	"monitoring.coreos.com/v1/PrometheusRule": true,
	"cert-manager.io/v1/Certificate":          true,
}

// rendered is one release's objects, by kind and name.
type rendered struct {
	objs   map[string]map[string]runtime.Object // kind -> name -> object
	custom map[string]map[string]*unstructured.Unstructured
	source map[string]string // "kind/name" -> template
}

func (r *rendered) names(kind string) []string {
	var out []string
	for n := range r.objs[kind] {
		out = append(out, n)
	}
	for n := range r.custom[kind] {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

func get[T runtime.Object](t *testing.T, r *rendered, kind, name string) T {
	t.Helper()
	o, ok := r.objs[kind][name]
	if !ok {
		t.Fatalf("no %s %q rendered (have %v)", kind, name, r.names(kind))
	}
	return o.(T)
}

// render renders the chart as helm install would, with the values files
// given (none: the defaults), and decodes every object strictly.
func render(t *testing.T, valuesFiles ...string) *rendered {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	vals := map[string]any{}
	for _, f := range valuesFiles {
		v, err := common.ReadValuesFile(f)
		if err != nil {
			t.Fatalf("values %s: %v", f, err)
		}
		vals = util.MergeTables(v.AsMap(), vals)
	}
	top, err := util.ToRenderValues(ch, vals, common.ReleaseOptions{
		Name: release, Namespace: namespace, Revision: 1, IsInstall: true,
	}, common.DefaultCapabilities)
	if err != nil {
		t.Fatalf("values: %v", err)
	}
	// Strict: a template naming a value that does not exist fails.
	files, err := engine.Engine{Strict: true}.Render(ch, top)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	decoder := serializer.NewCodecFactory(scheme, serializer.EnableStrict).UniversalDeserializer()
	r := &rendered{objs: map[string]map[string]runtime.Object{},
		custom: map[string]map[string]*unstructured.Unstructured{}, source: map[string]string{}}
	var paths []string
	for p := range files {
		paths = append(paths, p)
	}
	sort.Strings(paths)
	for _, path := range paths {
		if strings.HasSuffix(path, "NOTES.txt") {
			if !strings.Contains(files[path], release+"-0") {
				t.Errorf("%s does not name the first server:\n%s", path, files[path])
			}
			continue
		}
		rd := utilyaml.NewYAMLReader(bufio.NewReader(strings.NewReader(files[path])))
		for {
			doc, err := rd.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			js, err := yaml.YAMLToJSON(doc)
			if err != nil {
				t.Fatalf("%s: not YAML: %v\n%s", path, err, doc)
			}
			if string(bytes.TrimSpace(js)) == "null" {
				continue // comments only, or a disabled template
			}
			u := &unstructured.Unstructured{}
			if err := u.UnmarshalJSON(js); err != nil {
				t.Fatalf("%s: %v\n%s", path, err, doc)
			}
			kind, name := u.GetKind(), u.GetName()
			key := kind + "/" + name
			if prev, dup := r.source[key]; dup {
				t.Errorf("%s %q rendered twice (%s, %s)", kind, name, prev, path)
			}
			r.source[key] = path
			if u.GetNamespace() != "" {
				t.Errorf("%s: %s sets its namespace; helm install -n sets it", path, key)
			}
			if customKinds[u.GetAPIVersion()+"/"+kind] {
				if r.custom[kind] == nil {
					r.custom[kind] = map[string]*unstructured.Unstructured{}
				}
				r.custom[kind][name] = u
				continue
			}
			obj, gvk, err := decoder.Decode(doc, nil, nil)
			if err != nil {
				t.Fatalf("%s: %s does not decode strictly: %v\n%s", path, key, err, doc)
			}
			if r.objs[gvk.Kind] == nil {
				r.objs[gvk.Kind] = map[string]runtime.Object{}
			}
			r.objs[gvk.Kind][name] = obj
		}
	}
	return r
}

func TestDefaultValues(t *testing.T) {
	r := render(t)
	want := map[string][]string{
		"StatefulSet":         {"ration"},
		"Service":             {"ration", "ration-headless"},
		"PodDisruptionBudget": {"ration"},
		"ServiceAccount":      {"ration"},
	}
	checkKinds(t, r, want)
	sts := checkServers(t, r)
	c := sts.Spec.Template.Spec.Containers[0]
	for _, a := range c.Args {
		if strings.HasPrefix(a, "--tls-") || a == "--acl-enabled" || strings.HasPrefix(a, "--gossip-key-file") {
			t.Errorf("default values: rationd %s", a)
		}
	}
	checkCommon(t, r)
}

func TestSecureValues(t *testing.T) {
	r := render(t, filepath.Join(chartDir, "ci", "secure-values.yaml"))
	want := map[string][]string{
		"StatefulSet":             {"ration"},
		"Deployment":              {"ration-edge"},
		"Service":                 {"ration", "ration-edge", "ration-headless"},
		"PodDisruptionBudget":     {"ration", "ration-edge"},
		"HorizontalPodAutoscaler": {"ration-edge"},
		"ServiceAccount":          {"ration", "ration-acl-bootstrap"},
		"Role":                    {"ration-acl-bootstrap"},
		"RoleBinding":             {"ration-acl-bootstrap"},
		"Job":                     {"ration-acl-bootstrap", "ration-policy-apply"},
		"ConfigMap":               {"ration-edge-envoy", "ration-policies"},
		"ServiceMonitor":          {"ration"},
		"PrometheusRule":          {"ration"},
		"Certificate":             {"ration-client", "ration-edge", "ration-server"},
	}
	checkKinds(t, r, want)
	sts := checkServers(t, r)
	checkCommon(t, r)

	// Servers: mutual TLS from the server Secret, verified names, ACLs,
	// gossip encryption.
	c := sts.Spec.Template.Spec.Containers[0]
	for _, a := range []string{
		"--tls-ca-file=/etc/ration/tls/ca.crt", "--tls-cert-file=/etc/ration/tls/tls.crt",
		"--tls-key-file=/etc/ration/tls/tls.key", "--tls-verify-server-hostname", "--cluster-name=prod",
		"--acl-enabled", "--gossip-key-file=/etc/ration/gossip/key",
	} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("rationd args lack %s: %q", a, c.Args)
		}
	}
	pod := sts.Spec.Template.Spec
	checkSecretMount(t, pod, c, "/etc/ration/tls", "ration-server-tls")
	checkSecretMount(t, pod, c, "/etc/ration/gossip", "ration-gossip-key")
	checkSecretMount(t, pod, c, "/etc/ration/token", "ration-operator-token")
	pre := c.Lifecycle.PreStop.Exec.Command
	for _, a := range []string{"--tls-server-name=server.prod.ration", "--tls-cert-file=/etc/ration/tls/tls.crt", "--token-file=/etc/ration/token/token"} {
		if !slices.Contains(pre, a) {
			t.Errorf("preStop lacks %s: %q", a, pre)
		}
	}

	// The edge: dials every server by name with TLS, serves its own ports
	// with its own certificate, scaled by the HPA.
	dep := get[*appsv1.Deployment](t, r, "Deployment", "ration-edge")
	e := dep.Spec.Template.Spec.Containers[0]
	if len(e.Args) == 0 || e.Args[0] != "edge" {
		t.Fatalf("edge args %q: want rationd edge", e.Args)
	}
	wantServers := "--servers=" + serverNames(7400)
	if !slices.Contains(e.Args, wantServers) || !slices.Contains(e.Args, "--tls-verify-server-hostname") {
		t.Errorf("edge args %q: want %s and --tls-verify-server-hostname", e.Args, wantServers)
	}
	checkSecretMount(t, dep.Spec.Template.Spec, e, "/etc/ration/tls", "ration-edge-tls")
	checkSecretMount(t, dep.Spec.Template.Spec, e, "/etc/ration/token", "ration-edge-token")
	checkProbes(t, "edge", e)
	checkSecurity(t, "edge", dep.Spec.Template.Spec, e)
	if dep.Spec.Replicas != nil {
		t.Errorf("edge Deployment sets replicas %d beside its HPA", *dep.Spec.Replicas)
	}
	hpa := get[*autoscalingv2.HorizontalPodAutoscaler](t, r, "HorizontalPodAutoscaler", "ration-edge")
	if ref := hpa.Spec.ScaleTargetRef; ref.Kind != "Deployment" || ref.Name != dep.Name || ref.APIVersion != "apps/v1" {
		t.Errorf("HPA scales %+v, want the edge Deployment", ref)
	}
	checkSelects(t, "edge Service", get[*corev1.Service](t, r, "Service", "ration-edge").Spec.Selector, dep.Spec.Template.Labels)
	checkSelects(t, "edge PDB", get[*policyv1.PodDisruptionBudget](t, r, "PodDisruptionBudget", "ration-edge").Spec.Selector.MatchLabels, dep.Spec.Template.Labels)

	checkJobs(t, r)
	checkMonitoring(t, r)

	// cert-manager Certificates fill the Secrets the pods mount; the
	// servers' names the one every peer verifies.
	secrets := map[string]string{}
	for name, u := range r.custom["Certificate"] {
		s, _, _ := unstructured.NestedString(u.Object, "spec", "secretName")
		secrets[name] = s
	}
	if want := map[string]string{"ration-server": "ration-server-tls", "ration-client": "ration-client-tls", "ration-edge": "ration-edge-tls"}; !equalMaps(secrets, want) {
		t.Errorf("Certificates' secrets %v, want %v", secrets, want)
	}
	dns, _, _ := unstructured.NestedStringSlice(r.custom["Certificate"]["ration-server"].Object, "spec", "dnsNames")
	if !slices.Contains(dns, "server.prod.ration") {
		t.Errorf("server Certificate names %q, want server.prod.ration", dns)
	}
}

// checkKinds: exactly these objects, no more.
func checkKinds(t *testing.T, r *rendered, want map[string][]string) {
	t.Helper()
	kinds := map[string]bool{}
	for k := range r.objs {
		kinds[k] = true
	}
	for k := range r.custom {
		kinds[k] = true
	}
	for k := range want {
		kinds[k] = true
	}
	for k := range kinds {
		if got := r.names(k); !slices.Equal(got, want[k]) {
			t.Errorf("%s: rendered %q, want %q", k, got, want[k])
		}
	}
}

func serverNames(port int) string {
	var s []string
	for i := range 3 {
		s = append(s, fmt.Sprintf("ration-%d.%s:%d", i, suffix, port))
	}
	return strings.Join(s, ",")
}

// checkServers checks the StatefulSet, its Services and PDB, and returns it.
func checkServers(t *testing.T, r *rendered) *appsv1.StatefulSet {
	t.Helper()
	sts := get[*appsv1.StatefulSet](t, r, "StatefulSet", "ration")
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("podManagementPolicy %q, want Parallel: readiness needs a leader", sts.Spec.PodManagementPolicy)
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("replicas %v, want 3", sts.Spec.Replicas)
	}
	if sts.Spec.UpdateStrategy.Type != appsv1.RollingUpdateStatefulSetStrategyType {
		t.Errorf("updateStrategy %q, want RollingUpdate", sts.Spec.UpdateStrategy.Type)
	}
	if sts.Spec.ServiceName != "ration-headless" {
		t.Errorf("serviceName %q, want ration-headless", sts.Spec.ServiceName)
	}
	pod := sts.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want rationd alone", len(pod.Containers))
	}
	c := pod.Containers[0]
	checkProbes(t, "rationd", c)
	checkSecurity(t, "rationd", pod, c)
	if c.Resources.Requests.Cpu().IsZero() || c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
		t.Errorf("rationd resources %+v: want cpu and memory requests and a memory limit", c.Resources)
	}

	// Every server joins all three by their stable names (each skips its
	// own) and advertises its own, which $(POD_NAME) makes per pod.
	for _, a := range []string{
		"--id=$(POD_NAME)", "--data-dir=/data", "--bootstrap-expect=3",
		"--join=" + serverNames(7420),
		"--advertise-raft-addr=$(POD_NAME)." + suffix + ":7410",
		"--advertise-grpc-addr=$(POD_NAME)." + suffix + ":7400",
		"--advertise-gossip-addr=$(POD_NAME)." + suffix + ":7420",
		"--raft-addr=0.0.0.0:7410", "--grpc-addr=0.0.0.0:7400", "--gossip-addr=0.0.0.0:7420", "--http-addr=0.0.0.0:7430",
	} {
		if !slices.Contains(c.Args, a) {
			t.Errorf("rationd args lack %s:\n%s", a, strings.Join(c.Args, "\n"))
		}
	}
	if len(c.Env) == 0 || c.Env[0].Name != "POD_NAME" || c.Env[0].ValueFrom == nil ||
		c.Env[0].ValueFrom.FieldRef == nil || c.Env[0].ValueFrom.FieldRef.FieldPath != "metadata.name" {
		t.Errorf("env %+v: want POD_NAME from metadata.name first", c.Env)
	}
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
		t.Fatalf("no preStop exec hook")
	}
	pre := c.Lifecycle.PreStop.Exec.Command
	if pre[0] != "/rationctl" || !slices.Contains(pre, "--servers=127.0.0.1:7400") ||
		!slices.Equal(pre[len(pre)-3:], []string{"leader", "transfer", "--if-leader"}) {
		t.Errorf("preStop %q: want /rationctl --servers=127.0.0.1:7400 ... leader transfer --if-leader", pre)
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || *g < 20 {
		t.Errorf("terminationGracePeriodSeconds %v: want room for the hand-over and the 10s drain", g)
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 || sts.Spec.VolumeClaimTemplates[0].Name != "data" ||
		sts.Spec.VolumeClaimTemplates[0].Spec.Resources.Requests.Storage().IsZero() {
		t.Errorf("volumeClaimTemplates %+v: want one, data, with a size", sts.Spec.VolumeClaimTemplates)
	}
	if m := mountOf(c, "data"); m == nil || m.MountPath != "/data" {
		t.Errorf("the data volume is not mounted at /data: %+v", c.VolumeMounts)
	}
	checkSelects(t, "StatefulSet", sts.Spec.Selector.MatchLabels, sts.Spec.Template.Labels)

	hl := get[*corev1.Service](t, r, "Service", "ration-headless")
	if hl.Spec.ClusterIP != corev1.ClusterIPNone || !hl.Spec.PublishNotReadyAddresses {
		t.Errorf("headless Service: clusterIP %q, publishNotReadyAddresses %v; want None, true",
			hl.Spec.ClusterIP, hl.Spec.PublishNotReadyAddresses)
	}
	checkSelects(t, "headless Service", hl.Spec.Selector, sts.Spec.Template.Labels)
	ports := map[string]bool{}
	for _, p := range hl.Spec.Ports {
		ports[fmt.Sprintf("%s/%d", p.Protocol, p.Port)] = true
	}
	for _, p := range []string{"TCP/7400", "TCP/7410", "TCP/7420", "UDP/7420", "TCP/7430"} {
		if !ports[p] {
			t.Errorf("headless Service lacks %s: %v", p, ports)
		}
	}
	// Every Service port's target is a port the pods name.
	for _, svc := range r.objs["Service"] {
		svc := svc.(*corev1.Service)
		for _, p := range svc.Spec.Ports {
			if !podsNamePort(r, svc.Spec.Selector, p.TargetPort.String(), p.Protocol) {
				t.Errorf("Service %s port %s targets %q, which no selected container names", svc.Name, p.Name, p.TargetPort.String())
			}
		}
	}
	client := get[*corev1.Service](t, r, "Service", "ration")
	checkSelects(t, "client Service", client.Spec.Selector, sts.Spec.Template.Labels)
	if client.Spec.ClusterIP == corev1.ClusterIPNone || client.Spec.PublishNotReadyAddresses {
		t.Errorf("the client Service must balance over ready servers only")
	}

	pdb := get[*policyv1.PodDisruptionBudget](t, r, "PodDisruptionBudget", "ration")
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 || pdb.Spec.MinAvailable != nil {
		t.Errorf("PDB maxUnavailable %v minAvailable %v, want 1 and none", pdb.Spec.MaxUnavailable, pdb.Spec.MinAvailable)
	}
	checkSelects(t, "PDB", pdb.Spec.Selector.MatchLabels, sts.Spec.Template.Labels)
	return sts
}

func checkProbes(t *testing.T, what string, c corev1.Container) {
	t.Helper()
	for _, p := range []struct {
		name  string
		probe *corev1.Probe
		path  string
	}{{"liveness", c.LivenessProbe, "/livez"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
		if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path || p.probe.HTTPGet.Port.String() != "http" {
			t.Errorf("%s %s probe %+v: want GET %s on the http port", what, p.name, p.probe, p.path)
		}
	}
	if !slices.ContainsFunc(c.Ports, func(p corev1.ContainerPort) bool { return p.Name == "http" }) {
		t.Errorf("%s names no http port", what)
	}
}

// checkSecurity: non-root, read-only root filesystem, nothing to escalate.
func checkSecurity(t *testing.T, what string, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	ps, cs := pod.SecurityContext, c.SecurityContext
	if ps == nil || ps.RunAsNonRoot == nil || !*ps.RunAsNonRoot || ps.RunAsUser == nil || *ps.RunAsUser == 0 ||
		ps.FSGroup == nil || ps.SeccompProfile == nil || ps.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("%s pod securityContext %+v: want runAsNonRoot, a non-zero user, fsGroup, RuntimeDefault seccomp", what, ps)
	}
	if cs == nil || cs.RunAsNonRoot == nil || !*cs.RunAsNonRoot || cs.ReadOnlyRootFilesystem == nil || !*cs.ReadOnlyRootFilesystem ||
		cs.AllowPrivilegeEscalation == nil || *cs.AllowPrivilegeEscalation || cs.Capabilities == nil ||
		!slices.Equal(cs.Capabilities.Drop, []corev1.Capability{"ALL"}) {
		t.Errorf("%s securityContext %+v: want runAsNonRoot, readOnlyRootFilesystem, no privilege escalation, drop ALL", what, cs)
	}
}

func mountOf(c corev1.Container, volume string) *corev1.VolumeMount {
	for i, m := range c.VolumeMounts {
		if m.Name == volume {
			return &c.VolumeMounts[i]
		}
	}
	return nil
}

// checkSecretMount: the container mounts Secret secret, read-only, at path.
func checkSecretMount(t *testing.T, pod corev1.PodSpec, c corev1.Container, path, secret string) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		if m.MountPath != path {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name == m.Name && v.Secret != nil && v.Secret.SecretName == secret && m.ReadOnly {
				if mode := v.Secret.DefaultMode; mode == nil || *mode&0o040 == 0 {
					t.Errorf("%s: Secret %s mode %v: the group (fsGroup) must read it", c.Name, secret, mode)
				}
				return
			}
		}
	}
	t.Errorf("%s mounts no Secret %s read-only at %s", c.Name, secret, path)
}

func checkSelects(t *testing.T, what string, selector, podLabels map[string]string) {
	t.Helper()
	if len(selector) == 0 || !labels.SelectorFromSet(selector).Matches(labels.Set(podLabels)) {
		t.Errorf("%s selector %v does not select its pods %v", what, selector, podLabels)
	}
}

// podsNamePort: some container of the pods selector selects names port.
func podsNamePort(r *rendered, selector map[string]string, port string, proto corev1.Protocol) bool {
	for _, pt := range podTemplates(r) {
		if !labels.SelectorFromSet(selector).Matches(labels.Set(pt.Labels)) {
			continue
		}
		for _, c := range pt.Spec.Containers {
			for _, p := range c.Ports {
				if p.Name == port && p.Protocol == proto {
					return true
				}
			}
		}
	}
	return false
}

func podTemplates(r *rendered) map[string]corev1.PodTemplateSpec {
	out := map[string]corev1.PodTemplateSpec{}
	for n, o := range r.objs["StatefulSet"] {
		out["StatefulSet/"+n] = o.(*appsv1.StatefulSet).Spec.Template
	}
	for n, o := range r.objs["Deployment"] {
		out["Deployment/"+n] = o.(*appsv1.Deployment).Spec.Template
	}
	for n, o := range r.objs["Job"] {
		out["Job/"+n] = o.(*batchv1.Job).Spec.Template
	}
	return out
}

// fileFlag matches a flag naming a file or directory a process reads.
var fileFlag = regexp.MustCompile(`^--?(tls-ca-file|tls-cert-file|tls-key-file|token-file|gossip-key-file|envoy-config|config|f|secret-file|data-dir)=(.+)$`)

// checkCommon runs over every pod: every file a flag names lies in a
// mounted volume (the root filesystem is read-only and holds none), and
// every flag is one rationd, rationd edge or rationctl declares.
func checkCommon(t *testing.T, r *rendered) {
	t.Helper()
	rationd, edge, rationctl := declaredFlags(t)
	for name, pt := range podTemplates(r) {
		for _, c := range append(slices.Clone(pt.Spec.InitContainers), pt.Spec.Containers...) {
			var cmds [][]string
			cmds = append(cmds, append(slices.Clone(c.Command), c.Args...))
			if c.Lifecycle != nil && c.Lifecycle.PreStop != nil && c.Lifecycle.PreStop.Exec != nil {
				cmds = append(cmds, c.Lifecycle.PreStop.Exec.Command)
			}
			for _, cmd := range cmds {
				var known map[string]bool
				var prog string
				switch {
				case len(cmd) > 0 && cmd[0] == "/rationctl":
					known, prog = rationctl, "rationctl"
				case len(c.Command) == 0 && len(cmd) > 0 && cmd[0] == "edge":
					known, prog = edge, "rationd edge"
				case len(c.Command) == 0:
					known, prog = rationd, "rationd"
				default:
					continue // kubectl
				}
				// -f takes its value as the next argument.
				for i := 0; i < len(cmd); i++ {
					a := cmd[i]
					if a == "-f" && i+1 < len(cmd) {
						a = "-f=" + cmd[i+1]
						i++
					}
					if !strings.HasPrefix(a, "-") {
						continue
					}
					flag := strings.TrimLeft(strings.SplitN(a, "=", 2)[0], "-")
					if !known[flag] {
						t.Errorf("%s %s: %s is not a flag of %s", name, c.Name, a, prog)
					}
					if m := fileFlag.FindStringSubmatch(a); m != nil && !underMount(pt.Spec, c, m[2]) {
						t.Errorf("%s %s: %s is in no mounted volume %+v", name, c.Name, a, c.VolumeMounts)
					}
				}
			}
		}
		if name != "Job/ration-acl-bootstrap" {
			for _, c := range pt.Spec.Containers {
				checkSecurity(t, name, pt.Spec, c)
			}
		}
		if pt.Spec.AutomountServiceAccountToken == nil || *pt.Spec.AutomountServiceAccountToken {
			if name != "Job/ration-acl-bootstrap" { // kubectl needs its token
				t.Errorf("%s mounts a service account token it does not use", name)
			}
		}
	}
}

func underMount(pod corev1.PodSpec, c corev1.Container, path string) bool {
	for _, m := range c.VolumeMounts {
		if path == m.MountPath || strings.HasPrefix(path, strings.TrimSuffix(m.MountPath, "/")+"/") {
			return slices.ContainsFunc(pod.Volumes, func(v corev1.Volume) bool { return v.Name == m.Name }) ||
				m.Name == "data" // the StatefulSet's volumeClaimTemplate
		}
	}
	return false
}

// declaredFlag finds flag declarations in the commands' sources:
// fs.StringVar(&o.x, "name", ... and the like.
var declaredFlag = regexp.MustCompile(`fs\.[A-Za-z0-9]+\([^"\n]*"([a-z][a-z0-9-]*)"`)

// declaredFlags reads the flags rationd, rationd edge and rationctl
// declare from their sources (../../cmd), so a flag misspelt in the chart
// fails here rather than in a pod.
func declaredFlags(t *testing.T) (rationd, edge, rationctl map[string]bool) {
	t.Helper()
	scan := func(files ...string) map[string]bool {
		out := map[string]bool{}
		for _, f := range files {
			b, err := os.ReadFile(filepath.Join("..", "..", "cmd", f))
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range declaredFlag.FindAllStringSubmatch(string(b), -1) {
				out[m[1]] = true
			}
		}
		if len(out) == 0 {
			t.Fatalf("no flags found in %v", files)
		}
		return out
	}
	rationd = scan("rationd/flags.go", "rationd/observe.go", "rationd/tls.go")
	edge = scan("rationd/edge.go", "rationd/tls.go")
	ctlFiles, err := filepath.Glob(filepath.Join("..", "..", "cmd", "rationctl", "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range ctlFiles {
		if !strings.HasSuffix(f, "_test.go") {
			names = append(names, filepath.Join("rationctl", filepath.Base(f)))
		}
	}
	rationctl = scan(names...)
	// A few the generic pattern cannot see, checked by name in the sources.
	for _, f := range []string{"token-file", "tls-server-name", "servers", "timeout", "f"} {
		if !rationctl[f] {
			t.Fatalf("rationctl's sources declare no --%s", f)
		}
	}
	for _, f := range []string{"acl-enabled", "advertise-raft-addr", "join", "http-addr"} {
		if !rationd[f] {
			t.Fatalf("rationd's sources declare no --%s", f)
		}
	}
	return rationd, edge, rationctl
}

// checkJobs: the ACL bootstrap and policy hooks, in that order.
func checkJobs(t *testing.T, r *rendered) {
	t.Helper()
	boot := get[*batchv1.Job](t, r, "Job", "ration-acl-bootstrap")
	apply := get[*batchv1.Job](t, r, "Job", "ration-policy-apply")
	if h := boot.Annotations["helm.sh/hook"]; h != "post-install" {
		t.Errorf("ACL bootstrap hook %q, want post-install only (it works once per cluster)", h)
	}
	if h := apply.Annotations["helm.sh/hook"]; h != "post-install,post-upgrade" {
		t.Errorf("policy hook %q, want post-install,post-upgrade", h)
	}
	if b, a := boot.Annotations["helm.sh/hook-weight"], apply.Annotations["helm.sh/hook-weight"]; !(atoi(t, b) < atoi(t, a)) {
		t.Errorf("hook weights: bootstrap %s, policy apply %s; the bootstrap must run first", b, a)
	}
	bs := boot.Spec.Template.Spec
	if bs.RestartPolicy != corev1.RestartPolicyOnFailure || len(bs.InitContainers) != 1 || len(bs.Containers) != 1 {
		t.Fatalf("bootstrap pod: restartPolicy %q, %d init containers, %d containers; want OnFailure, 1, 1",
			bs.RestartPolicy, len(bs.InitContainers), len(bs.Containers))
	}
	ic := bs.InitContainers[0].Command
	if !slices.Contains(ic, "--secret-file=/work/token") || !slices.Contains(ic, "--servers="+serverNames(7400)) ||
		!slices.Contains(ic, "--tls-cert-file=/etc/ration/tls/tls.crt") {
		t.Errorf("bootstrap command %q", ic)
	}
	checkSecretMount(t, bs, bs.InitContainers[0], "/etc/ration/tls", "ration-client-tls")
	store := bs.Containers[0].Command
	if want := []string{"kubectl", "create", "secret", "generic", "ration-acl-bootstrap", "--namespace=" + namespace, "--from-file=token=/work/token"}; !slices.Equal(store, want) {
		t.Errorf("store command %q, want %q", store, want)
	}
	if bs.ServiceAccountName != "ration-acl-bootstrap" {
		t.Errorf("bootstrap runs as %q", bs.ServiceAccountName)
	}
	role := get[*rbacv1.Role](t, r, "Role", "ration-acl-bootstrap")
	if len(role.Rules) != 1 || !slices.Equal(role.Rules[0].Resources, []string{"secrets"}) || !slices.Equal(role.Rules[0].Verbs, []string{"create"}) {
		t.Errorf("bootstrap Role %+v: want create secrets only", role.Rules)
	}

	as := apply.Spec.Template.Spec
	cmd := as.Containers[0].Command
	if !slices.Equal(cmd[len(cmd)-5:], []string{"policy", "apply", "--prune", "-f", "/etc/ration/policies/policies.yaml"}) ||
		!slices.Contains(cmd, "--token-file=/etc/ration/token/token") {
		t.Errorf("policy command %q", cmd)
	}
	checkSecretMount(t, as, as.Containers[0], "/etc/ration/token", "ration-acl-bootstrap")
	cm := get[*corev1.ConfigMap](t, r, "ConfigMap", "ration-policies")
	var pf struct {
		Policies []map[string]any `json:"policies"`
	}
	if err := yaml.UnmarshalStrict([]byte(cm.Data["policies.yaml"]), &pf); err != nil || len(pf.Policies) != 1 || pf.Policies[0]["name"] != "api" {
		t.Errorf("policies ConfigMap: %v, %+v\n%s", err, pf, cm.Data["policies.yaml"])
	}
}

func atoi(t *testing.T, s string) int {
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("hook weight %q: %v", s, err)
	}
	return n
}

// docAlert is a row of docs/operations.md's "Alerts worth setting".
type docAlert struct{ name, expr, dur string }

var (
	codeSpan = regexp.MustCompile("`([^`]+)`")
	forDur   = regexp.MustCompile(`\bfor (\d+[smh])\b`)
)

// docAlerts reads the alerts table; rows whose expression is no PromQL
// (no ration_ metric in a code span) come back with expr "".
func docAlerts(t *testing.T) []docAlert {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, sec, ok := strings.Cut(string(b), "### Alerts worth setting\n")
	if !ok {
		t.Fatal("docs/operations.md has no section Alerts worth setting")
	}
	var out []docAlert
	for _, line := range strings.Split(sec, "\n") {
		if strings.HasPrefix(line, "#") {
			break
		}
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| ") || len(cells) < 3 || strings.HasPrefix(cells[1], "--") || cells[0] == "| Alert" {
			continue
		}
		a := docAlert{name: strings.TrimPrefix(cells[0], "| ")}
		for _, m := range codeSpan.FindAllStringSubmatch(cells[1], -1) {
			if strings.Contains(m[1], "ration_") {
				a.expr = m[1]
				break
			}
		}
		if m := forDur.FindStringSubmatch(cells[1]); m != nil {
			a.dur = m[1]
		}
		out = append(out, a)
	}
	if len(out) < 10 {
		t.Fatalf("read %d alerts from docs/operations.md: %+v", len(out), out)
	}
	return out
}

// alertName is the rule's name for a row: "Apply lag" -> RationApplyLag.
func alertName(doc string) string {
	var b strings.Builder
	b.WriteString("Ration")
	for _, w := range strings.Fields(doc) {
		b.WriteString(strings.ToUpper(w[:1]) + w[1:])
	}
	return b.String()
}

// checkMonitoring: the ServiceMonitor scrapes what exists, and the
// PrometheusRule holds exactly the documented alerts, parsed by
// Prometheus' own rule parser.
func checkMonitoring(t *testing.T, r *rendered) {
	t.Helper()
	sm := r.custom["ServiceMonitor"]["ration"]
	eps, _, _ := unstructured.NestedSlice(sm.Object, "spec", "endpoints")
	if len(eps) != 1 || eps[0].(map[string]any)["port"] != "http" || eps[0].(map[string]any)["path"] != "/metrics" {
		t.Errorf("ServiceMonitor endpoints %v: want /metrics on port http", eps)
	}
	scraped := map[string]bool{}
	for _, name := range []string{"ration-headless", "ration", "ration-edge"} {
		svc := get[*corev1.Service](t, r, "Service", name)
		scraped[name] = slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == "http" })
		ml, _, _ := unstructured.NestedStringMap(sm.Object, "spec", "selector", "matchLabels")
		if !labels.SelectorFromSet(ml).Matches(labels.Set(svc.Labels)) {
			scraped[name] = false
		}
	}
	if want := map[string]bool{"ration-headless": true, "ration": false, "ration-edge": true}; !equalMaps(scraped, want) {
		t.Errorf("the ServiceMonitor scrapes %v, want %v (each server once, through the headless Service)", scraped, want)
	}

	pr := r.custom["PrometheusRule"]["ration"]
	spec, _, _ := unstructured.NestedMap(pr.Object, "spec")
	if len(spec) != 1 {
		t.Errorf("PrometheusRule spec has %d fields, want groups only", len(spec))
	}
	groups, err := yaml.Marshal(spec)
	if err != nil {
		t.Fatal(err)
	}
	rgs, errs := rulefmt.Parse(groups, false, model.UTF8Validation, parser.NewParser(parser.Options{}), slog.New(slog.DiscardHandler))
	if len(errs) > 0 {
		t.Fatalf("rulefmt.Parse: %v\n%s", errs, groups)
	}
	got := map[string]rulefmt.Rule{}
	for _, g := range rgs.Groups {
		for _, rl := range g.Rules {
			if rl.Alert == "" {
				t.Errorf("rule %q records; want alerts only", rl.Record)
			}
			got[rl.Alert] = rl
			if rl.Labels["severity"] == "" || rl.Annotations["summary"] == "" {
				t.Errorf("%s lacks a severity label or a summary", rl.Alert)
			}
		}
	}
	var skipped []string
	for _, d := range docAlerts(t) {
		name := alertName(d.name)
		rl, ok := got[name]
		if d.expr == "" {
			skipped = append(skipped, d.name)
			if ok {
				t.Errorf("%s: documented without PromQL, yet a rule exists", name)
			}
			continue
		}
		delete(got, name)
		if !ok {
			t.Errorf("docs/operations.md recommends %q; no alert %s", d.name, name)
			continue
		}
		if rl.Expr != d.expr {
			t.Errorf("%s: expr\n  %s\nthe docs say\n  %s", name, rl.Expr, d.expr)
		}
		var dur string
		if rl.For != 0 {
			dur = rl.For.String()
		}
		if want := d.dur; want != "" {
			md, err := model.ParseDuration(want)
			if err != nil {
				t.Fatal(err)
			}
			want = md.String()
			if dur != want {
				t.Errorf("%s: for %q, the docs say %q", name, dur, want)
			}
		} else if dur != "" {
			t.Errorf("%s: for %s, the docs say none", name, dur)
		}
	}
	for name := range got {
		t.Errorf("alert %s is not in docs/operations.md", name)
	}
	if len(skipped) != 0 {
		t.Errorf("documented alerts without a metric expression: %q, want none", skipped)
	}
}

func equalMaps[V comparable](a, b map[string]V) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// TestLint runs Helm's own chart linter (helm lint) on both value sets:
// no warnings, no errors.
func TestLint(t *testing.T) {
	for _, vf := range []string{"", filepath.Join(chartDir, "ci", "secure-values.yaml")} {
		vals := map[string]any{}
		if vf != "" {
			v, err := common.ReadValuesFile(vf)
			if err != nil {
				t.Fatal(err)
			}
			vals = v.AsMap()
		}
		l := lint.RunAll(chartDir, vals, namespace)
		for _, m := range l.Messages {
			if m.Severity >= support.WarningSev {
				t.Errorf("helm lint (values %q): %s", vf, m)
			}
		}
	}
}
