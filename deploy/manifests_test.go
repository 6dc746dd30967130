package deploy

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"troupe/runtime/cluster"
)

// The subset of the Kubernetes API the manifests use. Decoding rejects
// unknown fields, so a misspelt field (servicename, volumeMount) fails the
// test instead of being silently ignored by the API server's defaults.

type object struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   meta              `json:"metadata"`
	Type       string            `json:"type,omitempty"`
	StringData map[string]string `json:"stringData,omitempty"`
	Items      []json.RawMessage `json:"items,omitempty"`
	Spec       json.RawMessage   `json:"spec,omitempty"`
}

type meta struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
}

type serviceSpec struct {
	Type                     string            `json:"type,omitempty"`
	ClusterIP                string            `json:"clusterIP,omitempty"`
	PublishNotReadyAddresses bool              `json:"publishNotReadyAddresses,omitempty"`
	Selector                 map[string]string `json:"selector"`
	Ports                    []servicePort     `json:"ports"`
}

type servicePort struct {
	Name       string `json:"name"`
	Port       int    `json:"port"`
	TargetPort string `json:"targetPort"`
	Protocol   string `json:"protocol"`
}

type labelSelector struct {
	MatchLabels map[string]string `json:"matchLabels"`
}

type pdbSpec struct {
	MaxUnavailable int           `json:"maxUnavailable"`
	Selector       labelSelector `json:"selector"`
}

type statefulSetSpec struct {
	ServiceName          string        `json:"serviceName"`
	Replicas             int           `json:"replicas"`
	PodManagementPolicy  string        `json:"podManagementPolicy"`
	Selector             labelSelector `json:"selector"`
	Template             podTemplate   `json:"template"`
	VolumeClaimTemplates []pvc         `json:"volumeClaimTemplates"`
}

type deploymentSpec struct {
	Replicas int           `json:"replicas"`
	Selector labelSelector `json:"selector"`
	Template podTemplate   `json:"template"`
}

type pvc struct {
	Metadata meta `json:"metadata"`
	Spec     struct {
		AccessModes []string `json:"accessModes"`
		Resources   struct {
			Requests map[string]string `json:"requests"`
		} `json:"resources"`
	} `json:"spec"`
}

type podTemplate struct {
	Metadata meta    `json:"metadata"`
	Spec     podSpec `json:"spec"`
}

type podSpec struct {
	TerminationGracePeriodSeconds int          `json:"terminationGracePeriodSeconds"`
	Tolerations                   []toleration `json:"tolerations,omitempty"`
	Containers                    []container  `json:"containers"`
}

type toleration struct {
	Key      string `json:"key"`
	Operator string `json:"operator"`
	Effect   string `json:"effect"`
}

type container struct {
	Name            string          `json:"name"`
	Image           string          `json:"image"`
	ImagePullPolicy string          `json:"imagePullPolicy"`
	Args            []string        `json:"args"`
	Env             []envVar        `json:"env"`
	Ports           []containerPort `json:"ports"`
	Resources       struct {
		Requests map[string]string `json:"requests,omitempty"`
		Limits   map[string]string `json:"limits,omitempty"`
	} `json:"resources"`
	VolumeMounts   []volumeMount `json:"volumeMounts,omitempty"`
	ReadinessProbe *probe        `json:"readinessProbe"`
	LivenessProbe  *probe        `json:"livenessProbe"`
}

type envVar struct {
	Name      string `json:"name"`
	Value     string `json:"value,omitempty"`
	ValueFrom *struct {
		FieldRef *struct {
			FieldPath string `json:"fieldPath"`
		} `json:"fieldRef,omitempty"`
		SecretKeyRef *struct {
			Name string `json:"name"`
			Key  string `json:"key"`
		} `json:"secretKeyRef,omitempty"`
	} `json:"valueFrom,omitempty"`
}

type containerPort struct {
	Name          string `json:"name"`
	ContainerPort int    `json:"containerPort"`
	Protocol      string `json:"protocol"`
}

type volumeMount struct {
	Name      string `json:"name"`
	MountPath string `json:"mountPath"`
}

type probe struct {
	Exec *struct {
		Command []string `json:"command"`
	} `json:"exec,omitempty"`
	TCPSocket *struct {
		Port string `json:"port"`
	} `json:"tcpSocket,omitempty"`
	InitialDelaySeconds int `json:"initialDelaySeconds,omitempty"`
	PeriodSeconds       int `json:"periodSeconds"`
	TimeoutSeconds      int `json:"timeoutSeconds"`
	FailureThreshold    int `json:"failureThreshold"`
}

// decodeStrict decodes b into v, refusing unknown fields, and checks that
// every key is spelt exactly as its struct tag: encoding/json matches keys
// case-insensitively, the Kubernetes API server does not.
func decodeStrict(b []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	var generic any
	if err := json.Unmarshal(b, &generic); err != nil {
		return err
	}
	return checkKeys(reflect.TypeOf(v).Elem(), generic, "")
}

// checkKeys compares the keys of decoded JSON with the json tags of t.
func checkKeys(t reflect.Type, v any, path string) error {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeOf(json.RawMessage(nil)) {
		return nil // checked when decoded into its own type
	}
	switch x := v.(type) {
	case map[string]any:
		switch t.Kind() {
		case reflect.Map:
			for k, e := range x {
				if err := checkKeys(t.Elem(), e, path+"."+k); err != nil {
					return err
				}
			}
		case reflect.Struct:
			fields := map[string]reflect.Type{}
			for i := 0; i < t.NumField(); i++ {
				name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
				fields[name] = t.Field(i).Type
			}
			for k, e := range x {
				ft, ok := fields[k]
				if !ok {
					return fmt.Errorf("field %s%s: not spelt as in the Kubernetes API", path, "."+k)
				}
				if err := checkKeys(ft, e, path+"."+k); err != nil {
					return err
				}
			}
		}
	case []any:
		if t.Kind() == reflect.Slice {
			for i, e := range x {
				if err := checkKeys(t.Elem(), e, fmt.Sprintf("%s[%d]", path, i)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// loadManifests reads every k8s/*.json file, flattening Lists, keyed by
// "Kind/name".
func loadManifests(t *testing.T) map[string]object {
	t.Helper()
	files, err := filepath.Glob("k8s/*.json")
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in k8s/: %v", err)
	}
	out := map[string]object{}
	var add func(src string, b []byte)
	add = func(src string, b []byte) {
		var o object
		if err := decodeStrict(b, &o); err != nil {
			t.Fatalf("%s: %v", src, err)
		}
		if o.Kind == "List" {
			for i, it := range o.Items {
				add(fmt.Sprintf("%s item %d", src, i), it)
			}
			return
		}
		if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
			t.Fatalf("%s: apiVersion, kind and metadata.name are required", src)
		}
		key := o.Kind + "/" + o.Metadata.Name
		if _, dup := out[key]; dup {
			t.Fatalf("%s: %s defined twice", src, key)
		}
		out[key] = o
	}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		add(f, b)
	}
	return out
}

func get[T any](t *testing.T, objs map[string]object, key, apiVersion string) (T, object) {
	t.Helper()
	var spec T
	o, ok := objs[key]
	if !ok {
		t.Fatalf("manifests define no %s", key)
	}
	if o.APIVersion != apiVersion {
		t.Errorf("%s: apiVersion %s, want %s", key, o.APIVersion, apiVersion)
	}
	if len(o.Spec) == 0 {
		return spec, o
	}
	if err := decodeStrict(o.Spec, &spec); err != nil {
		t.Fatalf("%s spec: %v", key, err)
	}
	return spec, o
}

// flagValue returns the value after --name in args ("" if absent).
func flagValue(args []string, name string) string {
	for i, a := range args {
		if a == "--"+name && i+1 < len(args) {
			return args[i+1]
		}
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v
		}
	}
	return ""
}

func hasFlag(args []string, name string) bool {
	for _, a := range args {
		if a == "--"+name || strings.HasPrefix(a, "--"+name+"=") {
			return true
		}
	}
	return false
}

// startFlags returns the flags `troupe start` defines, read from its
// source so a manifest cannot pass a flag the CLI does not have.
func startFlags(t *testing.T) map[string]bool {
	t.Helper()
	b, err := os.ReadFile("../cmd/troupe/start.go")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`fs\.[A-Z][A-Za-z]*\("([a-z-]+)"`).FindAllStringSubmatch(string(b), -1)
	out := map[string]bool{}
	for _, x := range m {
		out[x[1]] = true
	}
	for _, need := range []string{"server", "bootstrap-expect", "join", "bind", "advertise", "data-dir", "node-id"} {
		if !out[need] {
			t.Fatalf("could not find flag --%s in cmd/troupe/start.go (found %v): update this test", need, out)
		}
	}
	return out
}

func checkStartArgs(t *testing.T, where string, args []string, flags map[string]bool) {
	t.Helper()
	if len(args) == 0 || args[0] != "start" {
		t.Fatalf("%s: args %q do not run `troupe start`", where, args)
	}
	for _, a := range args[1:] {
		if name, ok := strings.CutPrefix(a, "--"); ok {
			name, _, _ = strings.Cut(name, "=")
			if !flags[name] {
				t.Errorf("%s: `troupe start` has no flag --%s", where, name)
			}
		}
	}
}

// checkNodeContainer checks what every node container needs: the token
// from the Secret, its pod IP advertised, the gRPC port the CLI defaults
// to, and probes that run `troupe health` against that port.
func checkNodeContainer(t *testing.T, where string, c container, secretName, secretKey string, flags map[string]bool) {
	t.Helper()
	checkStartArgs(t, where, c.Args, flags)
	grpc := strconv.Itoa(cluster.DefaultGRPCPort)
	if b := flagValue(c.Args, "bind"); !strings.HasSuffix(b, ":"+grpc) {
		t.Errorf("%s: --bind %q, want port %s", where, b, grpc)
	}
	env := map[string]envVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	tok := env["TROUPE_TOKEN"]
	if tok.ValueFrom == nil || tok.ValueFrom.SecretKeyRef == nil || tok.ValueFrom.SecretKeyRef.Name != secretName || tok.ValueFrom.SecretKeyRef.Key != secretKey {
		t.Errorf("%s: TROUPE_TOKEN must come from secret %s key %s, got %+v", where, secretName, secretKey, tok)
	}
	if hasFlag(c.Args, "token") {
		t.Errorf("%s: the token is passed in args (visible in the pod spec and ps); use TROUPE_TOKEN from the Secret", where)
	}
	// $(VAR) in args must name a declared env var, or Kubernetes passes it literally.
	for _, a := range c.Args {
		for _, m := range regexp.MustCompile(`\$\(([A-Z_]+)\)`).FindAllStringSubmatch(a, -1) {
			if _, ok := env[m[1]]; !ok {
				t.Errorf("%s: args use $(%s) but no env var %s is declared", where, m[1], m[1])
			}
		}
	}
	if flagValue(c.Args, "advertise") != "$(POD_IP)" {
		t.Errorf("%s: --advertise %q, want $(POD_IP)", where, flagValue(c.Args, "advertise"))
	}
	if ip := env["POD_IP"]; ip.ValueFrom == nil || ip.ValueFrom.FieldRef == nil || ip.ValueFrom.FieldRef.FieldPath != "status.podIP" {
		t.Errorf("%s: POD_IP must come from status.podIP", where)
	}
	ports := map[string]containerPort{}
	for _, p := range c.Ports {
		ports[p.Name] = p
	}
	if p := ports["grpc"]; p.ContainerPort != cluster.DefaultGRPCPort || p.Protocol != "TCP" {
		t.Errorf("%s: grpc port %+v, want %d/TCP", where, p, cluster.DefaultGRPCPort)
	}
	if ports["gossip-tcp"].ContainerPort != cluster.DefaultGRPCPort+1 || ports["gossip-udp"].ContainerPort != cluster.DefaultGRPCPort+1 || ports["gossip-udp"].Protocol != "UDP" {
		t.Errorf("%s: gossip needs port %d on TCP and UDP, got %+v", where, cluster.DefaultGRPCPort+1, c.Ports)
	}
	rp := c.ReadinessProbe
	if rp == nil || rp.Exec == nil || len(rp.Exec.Command) < 2 || rp.Exec.Command[1] != "health" || flagValue(rp.Exec.Command, "address") != "127.0.0.1:"+grpc {
		t.Errorf("%s: readiness probe must run `troupe health --address 127.0.0.1:%s`, got %+v", where, grpc, rp)
	} else if rp.TimeoutSeconds < 1 || rp.PeriodSeconds < rp.TimeoutSeconds {
		t.Errorf("%s: readiness probe timeout %ds, period %ds", where, rp.TimeoutSeconds, rp.PeriodSeconds)
	}
	// Liveness must not depend on quorum: a cluster without a leader must
	// not have its servers restarted in a loop.
	if lp := c.LivenessProbe; lp == nil || lp.TCPSocket == nil || lp.TCPSocket.Port != "grpc" {
		t.Errorf("%s: liveness probe should be a TCP check on the grpc port, got %+v", where, lp)
	}
}

func TestKubernetesManifests(t *testing.T) {
	objs := loadManifests(t)
	flags := startFlags(t)

	_, secret := get[json.RawMessage](t, objs, "Secret/troupe-token", "v1")
	if secret.StringData["token"] == "" {
		t.Fatal("Secret/troupe-token: no stringData.token")
	}
	const secretName, secretKey = "troupe-token", "token"

	sts, _ := get[statefulSetSpec](t, objs, "StatefulSet/troupe-server", "apps/v1")
	hl, _ := get[serviceSpec](t, objs, "Service/"+sts.ServiceName, "v1")
	head, _ := get[serviceSpec](t, objs, "Service/troupe-head", "v1")
	pdb, _ := get[pdbSpec](t, objs, "PodDisruptionBudget/troupe-server", "policy/v1")
	gw, _ := get[deploymentSpec](t, objs, "Deployment/troupe-gpu-worker", "apps/v1")

	// Servers: three raft voters with stable names and their own volumes.
	if sts.Replicas != 3 {
		t.Errorf("servers: %d replicas, want 3", sts.Replicas)
	}
	if sts.PodManagementPolicy != "Parallel" {
		t.Errorf("servers: podManagementPolicy %q: with OrderedReady pod 0 waits for readiness, which needs a quorum, which needs the other pods", sts.PodManagementPolicy)
	}
	podLabels := sts.Template.Metadata.Labels
	for _, sel := range []map[string]string{sts.Selector.MatchLabels, hl.Selector, head.Selector, pdb.Selector.MatchLabels} {
		for k, v := range sel {
			if podLabels[k] != v {
				t.Errorf("selector %v does not match the server pods' labels %v", sel, podLabels)
			}
		}
		if len(sel) == 0 {
			t.Error("an empty selector")
		}
	}
	if hl.ClusterIP != "None" || !hl.PublishNotReadyAddresses {
		t.Errorf("service %s must be headless and publish not-ready addresses (servers find each other before they are ready)", sts.ServiceName)
	}
	if pdb.MaxUnavailable != 1 {
		t.Errorf("servers' disruption budget: maxUnavailable %d, want 1 (a quorum of 3 survives one)", pdb.MaxUnavailable)
	}
	if len(sts.Template.Spec.Containers) != 1 {
		t.Fatalf("servers: %d containers, want 1", len(sts.Template.Spec.Containers))
	}
	sc := sts.Template.Spec.Containers[0]
	checkNodeContainer(t, "servers", sc, secretName, secretKey, flags)
	if !hasFlag(sc.Args, "server") || flagValue(sc.Args, "bootstrap-expect") != strconv.Itoa(sts.Replicas) {
		t.Errorf("servers: args %q need --server --bootstrap-expect %d", sc.Args, sts.Replicas)
	}
	if flagValue(sc.Args, "node-id") != "$(POD_NAME)" {
		t.Errorf("servers: --node-id %q, want $(POD_NAME) (stable across restarts)", flagValue(sc.Args, "node-id"))
	}
	// Every server lists all of them, itself included: a node recognises
	// its own address by node ID, so the pods need no per-pod arguments
	// and any two that start find each other.
	joins := strings.Split(flagValue(sc.Args, "join"), ",")
	if len(joins) != sts.Replicas {
		t.Errorf("servers: --join lists %d servers, want all %d", len(joins), sts.Replicas)
	}
	for _, j := range joins {
		host, port, ok := strings.Cut(j, ":")
		ord, found := strings.CutPrefix(host, "troupe-server-")
		n, err := strconv.Atoi(strings.TrimSuffix(ord, "."+sts.ServiceName))
		if !ok || !found || err != nil || n >= sts.Replicas || !strings.HasSuffix(host, "."+sts.ServiceName) || port != strconv.Itoa(cluster.DefaultGRPCPort) {
			t.Errorf("servers: --join %q is not a stable pod name troupe-server-N.%s:%d", j, sts.ServiceName, cluster.DefaultGRPCPort)
		}
	}
	ports := map[string]containerPort{}
	for _, p := range sc.Ports {
		ports[p.Name] = p
	}
	if ports["raft"].ContainerPort != cluster.DefaultGRPCPort+2 {
		t.Errorf("servers: raft port %d, want %d", ports["raft"].ContainerPort, cluster.DefaultGRPCPort+2)
	}
	// Every named service port targets a container port of that name and number.
	for _, svc := range []serviceSpec{hl, head} {
		for _, sp := range svc.Ports {
			cp, ok := ports[sp.TargetPort]
			if !ok || cp.ContainerPort != sp.Port || cp.Protocol != sp.Protocol {
				t.Errorf("service port %+v: no matching container port (have %+v)", sp, sc.Ports)
			}
		}
	}
	if len(head.Ports) != 1 || head.Ports[0].Port != cluster.DefaultGRPCPort {
		t.Errorf("Service/troupe-head: ports %+v, want only gRPC %d", head.Ports, cluster.DefaultGRPCPort)
	}
	dataDir := flagValue(sc.Args, "data-dir")
	var claim string
	for _, m := range sc.VolumeMounts {
		if m.MountPath == dataDir {
			claim = m.Name
		}
	}
	if claim == "" {
		t.Errorf("servers: --data-dir %q is not a mounted volume", dataDir)
	}
	okClaim := false
	for _, v := range sts.VolumeClaimTemplates {
		if v.Metadata.Name == claim && v.Spec.Resources.Requests["storage"] != "" && len(v.Spec.AccessModes) == 1 && v.Spec.AccessModes[0] == "ReadWriteOnce" {
			okClaim = true
		}
	}
	if !okClaim {
		t.Errorf("servers: the data dir volume %q is not a ReadWriteOnce volumeClaimTemplate with a storage request", claim)
	}

	// GPU workers: request whole GPUs, join through the head service.
	if gw.Replicas < 1 || len(gw.Template.Spec.Containers) != 1 {
		t.Fatalf("gpu workers: %d replicas, %d containers", gw.Replicas, len(gw.Template.Spec.Containers))
	}
	for k, v := range gw.Selector.MatchLabels {
		if gw.Template.Metadata.Labels[k] != v {
			t.Errorf("gpu workers: selector %v does not match pod labels %v", gw.Selector.MatchLabels, gw.Template.Metadata.Labels)
		}
	}
	if gw.Template.Metadata.Labels["app.kubernetes.io/component"] == podLabels["app.kubernetes.io/component"] {
		t.Error("gpu worker pods carry the server label: the head service would send clients to workers")
	}
	wc := gw.Template.Spec.Containers[0]
	checkNodeContainer(t, "gpu workers", wc, secretName, secretKey, flags)
	if hasFlag(wc.Args, "server") || hasFlag(wc.Args, "simulate-gpus") || hasFlag(wc.Args, "bootstrap-expect") {
		t.Errorf("gpu workers: args %q: a worker with real GPUs takes no --server, --bootstrap-expect or --simulate-gpus", wc.Args)
	}
	if flagValue(wc.Args, "join") != "troupe-head:"+strconv.Itoa(cluster.DefaultGRPCPort) {
		t.Errorf("gpu workers: --join %q, want the head service troupe-head:%d", flagValue(wc.Args, "join"), cluster.DefaultGRPCPort)
	}
	g, err := strconv.Atoi(wc.Resources.Limits["nvidia.com/gpu"])
	if err != nil || g < 1 {
		t.Errorf("gpu workers: limits nvidia.com/gpu %q, want a whole number ≥ 1", wc.Resources.Limits["nvidia.com/gpu"])
	}
	if _, ok := wc.Resources.Requests["nvidia.com/gpu"]; ok && wc.Resources.Requests["nvidia.com/gpu"] != wc.Resources.Limits["nvidia.com/gpu"] {
		t.Error("gpu workers: nvidia.com/gpu requests must equal limits")
	}
}

// TestComposeFlags checks that compose.yaml only passes flags `troupe
// start` has and takes the token from the env file, not the command line;
// the docker-tagged test runs the file for real.
func TestComposeFlags(t *testing.T) {
	b, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	flags := startFlags(t)
	n := 0
	for _, m := range regexp.MustCompile(`"--([a-z-]+)`).FindAllStringSubmatch(string(b), -1) {
		n++
		if !flags[m[1]] {
			t.Errorf("compose.yaml passes --%s, which `troupe start` does not have", m[1])
		}
		if m[1] == "token" {
			t.Error("compose.yaml passes --token: the token belongs in the env file")
		}
	}
	if n == 0 {
		t.Fatal("found no flags in compose.yaml")
	}
	for _, want := range []string{"env_file:", `"--bootstrap-expect", "3"`, `"--simulate-gpus", "dgx-h100"`, `"--simulate-gpus", "2x4-nvlink"`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("compose.yaml lacks %s", want)
		}
	}
	ex, err := os.ReadFile("cluster.env.example")
	if err != nil || !regexp.MustCompile(`(?m)^TROUPE_TOKEN=.+$`).Match(ex) {
		t.Errorf("cluster.env.example must set TROUPE_TOKEN (err %v)", err)
	}
}
