package deploytest

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"io"
	"os"
	"os/exec"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
)

// envHelm names the command that runs Helm (words separated by spaces):
// `make check-chart` sets it to go run helm.sh/helm/v4/cmd/helm@<version>.
// Unset, TestChart is skipped.
const envHelm = "HOOKGATE_HELM"

const (
	chartDir   = "../../../deploy/helm/hookgate"
	alertsFile = "../../../deploy/prometheus/alerts.yaml"
	docsFile   = "../../../docs/deployment.md"
)

// helm runs Helm with args and returns its standard output and error.
func helm(t *testing.T, args ...string) ([]byte, error) {
	t.Helper()
	words := strings.Fields(os.Getenv(envHelm))
	if len(words) == 0 {
		t.Skip(envHelm + " is not set: make check-chart runs the chart's tests with Helm")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var stderr bytes.Buffer
	cmd := exec.CommandContext(ctx, words[0], append(words[1:], args...)...)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, errors.New(err.Error() + ": " + stderr.String())
	}
	return out, nil
}

// manifest is one rendered Kubernetes object, as YAML decodes it.
type manifest = map[string]any

// at walks m along path (map keys, or list indexes as ints) and returns
// what is there, or nil.
func at(v any, path ...any) any {
	for _, p := range path {
		switch k := p.(type) {
		case string:
			m, ok := v.(map[string]any)
			if !ok {
				return nil
			}
			v = m[k]
		case int:
			l, ok := v.([]any)
			if !ok || k >= len(l) {
				return nil
			}
			v = l[k]
		}
	}
	return v
}

func str(v any, path ...any) string {
	s, _ := at(v, path...).(string)
	return s
}

// render runs helm template with the values file (under the chart's ci/)
// and the further arguments (--set …), and returns the objects by kind and
// name.
func render(t *testing.T, values string, args ...string) map[string]manifest {
	t.Helper()
	out, err := helm(t, append([]string{"template", "hg", chartDir, "-f", chartDir + "/ci/" + values}, args...)...)
	if err != nil {
		t.Fatalf("helm template -f ci/%s %q: %v", values, args, err)
	}
	objs := map[string]manifest{}
	dec := yaml.NewDecoder(bytes.NewReader(out))
	for {
		var m manifest
		err := dec.Decode(&m)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("helm template -f ci/%s: the output is not YAML: %v\n%s", values, err, out)
		}
		if m == nil {
			continue
		}
		key := str(m, "kind") + "/" + str(m, "metadata", "name")
		if _, dup := objs[key]; dup {
			t.Errorf("ci/%s: %s rendered twice", values, key)
		}
		objs[key] = m
	}
	return objs
}

// chartCase is what one values file of the chart's ci/ must render.
type chartCase struct {
	values      string
	name        string   // the subtest's, when values is rendered more than once
	set         []string // more arguments of helm template
	image       string
	replicas    map[string]int // role -> replicas: the Deployments
	poolMax     map[string]int // role -> pool_max_conns in its DATABASE_URL (chart's Secret only)
	existing    string         // the Secret of the operator's own, or "" for the chart's
	senders     []string       // the senders' variables
	job         bool
	pdb         bool
	ingress     bool
	monitor     bool // ServiceMonitor and PrometheusRule
	resources   map[string]string
	trustedProx string
	netpol      string // the NetworkPolicy's spec as YAML, or "" for none
}

// allValues is what ci/all-values.yaml renders.
var allValues = chartCase{values: "all-values.yaml", image: "hookgate:" + chartAppVersion(), replicas: map[string]int{"all": 1}, poolMax: map[string]int{"all": 32},
	senders: []string{"GITHUB_WEBHOOK_SECRET"}, job: true, pdb: true}

// netpolSelector is the NetworkPolicy's pod selector: every hookgate pod
// of the release hg, whatever its role.
const netpolSelector = "podSelector: {matchLabels: {app.kubernetes.io/name: hookgate, app.kubernetes.io/instance: hg}}\n"

// withNetworkPolicy is c rendered with the arguments set, as the subtest
// name, and the NetworkPolicy spec it must render.
func withNetworkPolicy(c chartCase, name string, set []string, spec string) chartCase {
	c.name, c.set, c.netpol = name, set, netpolSelector+spec
	return c
}

var chartCases = []chartCase{
	allValues,
	{values: "split-values.yaml", image: "registry.example.com/hookgate:1.2.3", replicas: map[string]int{"api": 3, "worker": 2},
		poolMax: map[string]int{"api": 24, "worker": 6}, senders: []string{"ORDERS_SIGNING_SECRET", "STRIPE_WEBHOOK_SECRET"},
		job: true, pdb: true, ingress: true, monitor: true, resources: map[string]string{"api": "500m", "worker": "250m"}, trustedProx: "10.0.0.0/8"},
	{values: "existing-secret-values.yaml", image: "hookgate:" + chartAppVersion(), replicas: map[string]int{"all": 1},
		existing: "hookgate-credentials", senders: []string{"GITHUB_WEBHOOK_SECRET"}},
	// The NetworkPolicy with its defaults: the http port from anywhere,
	// the metrics port from the namespace monitoring, egress unrestricted.
	withNetworkPolicy(allValues, "netpol-defaults", []string{"--set", "networkPolicy.enabled=true"}, `
policyTypes: [Ingress]
ingress:
  - ports: [{port: 8080, protocol: TCP}]
  - ports: [{port: 9090, protocol: TCP}]
    from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}}]
`),
	// metrics.from empty: no rule for the metrics port, which is closed.
	withNetworkPolicy(allValues, "netpol-metrics-closed", []string{"--set-json", `networkPolicy={"enabled":true,"metrics":{"from":[]}}`}, `
policyTypes: [Ingress]
ingress:
  - ports: [{port: 8080, protocol: TCP}]
`),
	// Split roles, both ports limited to selectors, egress restricted.
	{values: "networkpolicy-values.yaml", image: "hookgate:" + chartAppVersion(), replicas: map[string]int{"api": 2, "worker": 2},
		poolMax: map[string]int{"api": 24, "worker": 8}, senders: []string{"ORDERS_SIGNING_SECRET", "STRIPE_WEBHOOK_SECRET"},
		job: true, pdb: true, ingress: true, netpol: netpolSelector + `
policyTypes: [Ingress, Egress]
ingress:
  - ports: [{port: 8080, protocol: TCP}]
    from: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: ingress-nginx}}}]
  - ports: [{port: 9090, protocol: TCP}]
    from:
      - namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: monitoring}}
        podSelector: {matchLabels: {app.kubernetes.io/name: prometheus}}
egress:
  - ports: [{port: 53, protocol: UDP}, {port: 53, protocol: TCP}]
  - ports: [{port: 5432, protocol: TCP}]
    to: [{ipBlock: {cidr: 10.0.5.7/32}}]
  - to: [{namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: orders}}}]
    ports: [{port: 9000, protocol: TCP}]
`},
}

// chartAppVersion returns Chart.yaml's appVersion, the image tag by default.
func chartAppVersion() string {
	b, err := os.ReadFile(chartDir + "/Chart.yaml")
	if err != nil {
		return "(no Chart.yaml: " + err.Error() + ")"
	}
	var c struct {
		AppVersion string `yaml:"appVersion"`
	}
	_ = yaml.Unmarshal(b, &c)
	return c.AppVersion
}

// TestChart renders the chart with each values file of its ci/ (as
// `make check-chart` lints it) and checks the objects against what
// docs/deployment.md says: the image, the roles' Deployments, their probes,
// where each variable comes from (its tables "Where the containers' secrets
// come from" and "Probes"), the security context, the migration Job, the
// Service, Ingress, PodDisruptionBudget, ServiceMonitor and PrometheusRule
// (whose groups are deploy/prometheus/alerts.yaml's), and the NetworkPolicy,
// absent unless enabled.
func TestChart(t *testing.T) {
	if os.Getenv(envHelm) == "" {
		t.Skip(envHelm + " is not set: make check-chart runs the chart's tests with Helm")
	}
	secretRows := docsTable(t, "| variable | Secret key (chart's Secret) | Secret key (`existingSecret`) |")
	probeRows := docsTable(t, "| probe | request |")
	for _, c := range chartCases {
		name := c.name
		if name == "" {
			name = strings.TrimSuffix(c.values, "-values.yaml")
		}
		t.Run(name, func(t *testing.T) {
			objs := render(t, c.values, c.set...)
			checkChart(t, c, objs, secretRows, probeRows)
		})
	}
}

func checkChart(t *testing.T, c chartCase, objs map[string]manifest, secretRows, probeRows [][]string) {
	fullname := "hg-hookgate"
	secretName := fullname
	if c.existing != "" {
		secretName = c.existing
		if _, ok := objs["Secret/"+fullname]; ok {
			t.Errorf("a Secret of the chart's is rendered besides existingSecret")
		}
	}
	var secretData map[string]string
	if c.existing == "" {
		secretData = map[string]string{}
		data, ok := at(objs["Secret/"+fullname], "data").(map[string]any)
		if !ok {
			t.Fatalf("no Secret %s with data", fullname)
		}
		for k, v := range data {
			s, _ := v.(string)
			b, err := base64.StdEncoding.DecodeString(s)
			if err != nil {
				t.Fatalf("Secret key %s: %v", k, err)
			}
			secretData[k] = string(b)
		}
	}

	// The Deployments: one per role, and no other.
	var deployments []string
	for key := range objs {
		if strings.HasPrefix(key, "Deployment/") {
			deployments = append(deployments, key)
		}
	}
	var wantDeployments []string
	for role := range c.replicas {
		wantDeployments = append(wantDeployments, "Deployment/"+fullname+"-"+role)
	}
	slices.Sort(deployments)
	slices.Sort(wantDeployments)
	if !slices.Equal(deployments, wantDeployments) {
		t.Fatalf("Deployments %q, want %q", deployments, wantDeployments)
	}

	configMap := objs["ConfigMap/"+fullname]
	if str(configMap, "data", "hookgate.yaml") == "" || !strings.Contains(str(configMap, "data", "hookgate.yaml"), "senders:") {
		t.Errorf("the ConfigMap's hookgate.yaml is %q", str(configMap, "data", "hookgate.yaml"))
	}

	for role, replicas := range c.replicas {
		d := objs["Deployment/"+fullname+"-"+role]
		if n, _ := at(d, "spec", "replicas").(int); n != replicas {
			t.Errorf("%s: replicas %v, want %d", role, at(d, "spec", "replicas"), replicas)
		}
		pod := at(d, "spec", "template", "spec")
		ctr := at(pod, "containers", 0)
		if got := str(ctr, "image"); got != c.image {
			t.Errorf("%s: image %q, want %q", role, got, c.image)
		}
		if got := strings.Join(strs(at(ctr, "args")), " "); got != "serve --role "+role {
			t.Errorf("%s: args %q, want serve --role %s", role, got, role)
		}
		checkSecure(t, role, pod, ctr)
		if g, _ := at(pod, "terminationGracePeriodSeconds").(int); g <= 20 {
			t.Errorf("%s: terminationGracePeriodSeconds %d, want more than the shutdown timeout (20s)", role, g)
		}
		if want := c.resources[role]; want != "" && str(ctr, "resources", "requests", "cpu") != want {
			t.Errorf("%s: CPU request %q, want %q", role, str(ctr, "resources", "requests", "cpu"), want)
		}

		env := envOf(ctr)
		if env["HOOKGATE_CONFIG"].value != "/etc/hookgate/hookgate.yaml" {
			t.Errorf("%s: HOOKGATE_CONFIG %+v", role, env["HOOKGATE_CONFIG"])
		}
		if str(ctr, "volumeMounts", 0, "mountPath") != "/etc/hookgate" || str(pod, "volumes", 0, "configMap", "name") != fullname {
			t.Errorf("%s: hookgate.yaml is not the ConfigMap %s mounted at /etc/hookgate", role, fullname)
		}
		// A changed hookgate.yaml is reloaded by the processes
		// (--config-watch), not by rolling the pods: the ConfigMap is
		// mounted as a directory, which the kubelet updates in place.
		if env["HOOKGATE_CONFIG_WATCH"].value != "true" || str(ctr, "volumeMounts", 0, "subPath") != "" ||
			str(d, "spec", "template", "metadata", "annotations", "checksum/config") != "" {
			t.Errorf("%s: HOOKGATE_CONFIG_WATCH %+v, subPath %q, checksum/config %q; want true, none and none",
				role, env["HOOKGATE_CONFIG_WATCH"], str(ctr, "volumeMounts", 0, "subPath"), str(d, "spec", "template", "metadata", "annotations", "checksum/config"))
		}
		if env["HOOKGATE_METRICS_ADDR"].value != ":9090" || env["HOOKGATE_ADDR"].value != ":8080" {
			t.Errorf("%s: HOOKGATE_ADDR %+v, HOOKGATE_METRICS_ADDR %+v, want :8080 and :9090", role, env["HOOKGATE_ADDR"], env["HOOKGATE_METRICS_ADDR"])
		}
		if c.trustedProx != "" && env["HOOKGATE_TRUSTED_PROXIES"].value != c.trustedProx {
			t.Errorf("%s: HOOKGATE_TRUSTED_PROXIES %+v, want %s", role, env["HOOKGATE_TRUSTED_PROXIES"], c.trustedProx)
		}
		ports := map[string]int{}
		for i := range 2 {
			n, _ := at(ctr, "ports", i, "containerPort").(int)
			ports[str(ctr, "ports", i, "name")] = n
		}
		if ports["http"] != 8080 || ports["metrics"] != 9090 {
			t.Errorf("%s: ports %v, want http 8080 and metrics 9090", role, ports)
		}

		// The secrets, as the docs' table says.
		for _, row := range secretRows {
			variable, key := row[0], row[1]
			if c.existing != "" {
				key = row[2]
			}
			switch {
			case strings.HasPrefix(variable, "DATABASE_URL of --role"):
				key = strings.ReplaceAll(key, "R", role)
				checkSecretRef(t, role, env, "DATABASE_URL", secretName, key, false)
				if secretData != nil {
					url, ok := secretData[key]
					if !ok {
						t.Errorf("the chart's Secret has no key %s", key)
					} else if want := "pool_max_conns=" + strconv.Itoa(c.poolMax[role]); !strings.Contains(url, want) {
						t.Errorf("Secret key %s: %q has no %s", key, url, want)
					}
				}
			case variable == "HOOKGATE_ADMIN_TOKEN":
				checkSecretRef(t, role, env, "HOOKGATE_ADMIN_TOKEN", secretName, key, true)
				if secretData != nil && secretData[key] == "" {
					t.Errorf("the chart's Secret has no %s", key)
				}
			case strings.HasPrefix(variable, "NAME "):
				for _, name := range c.senders {
					checkSecretRef(t, role, env, name, secretName, strings.ReplaceAll(key, "NAME", name), false)
					if secretData != nil && secretData[name] == "" {
						t.Errorf("the chart's Secret has no %s", name)
					}
				}
			}
		}

		// The probes, as the docs' table says.
		for _, row := range probeRows {
			m := regexp.MustCompile(`^GET (\S+) on port (\S+)$`).FindStringSubmatch(row[1])
			if m == nil {
				t.Fatalf("docs/deployment.md's probe row %q: want GET <path> on port <name>", row)
			}
			p := at(ctr, row[0]+"Probe", "httpGet")
			if str(p, "path") != m[1] || str(p, "port") != m[2] {
				t.Errorf("%s: %sProbe %v, want GET %s on port %s", role, row[0], p, m[1], m[2])
			}
		}
	}

	// The migration Job: a hook, `migrate`, the Secret's database-url.
	job, hasJob := objs["Job/"+fullname+"-migrate"]
	if hasJob != c.job {
		t.Errorf("migration Job rendered %v, want %v", hasJob, c.job)
	}
	if hasJob {
		if hook := str(job, "metadata", "annotations", "helm.sh/hook"); hook != "post-install,pre-upgrade" {
			t.Errorf("the Job's helm.sh/hook is %q", hook)
		}
		pod := at(job, "spec", "template", "spec")
		ctr := at(pod, "containers", 0)
		if str(ctr, "image") != c.image || strings.Join(strs(at(ctr, "args")), " ") != "migrate" {
			t.Errorf("the Job runs %q %q, want %s migrate", str(ctr, "image"), strs(at(ctr, "args")), c.image)
		}
		checkSecure(t, "migrate", pod, ctr)
		for _, row := range secretRows {
			if row[0] == "DATABASE_URL of the migration Job" {
				key := row[1]
				if c.existing != "" {
					key = row[2]
				}
				checkSecretRef(t, "migrate", envOf(ctr), "DATABASE_URL", secretName, key, false)
			}
		}
	}

	// The Service: requests to the ingest role (all or api).
	ingestRole := "all"
	if _, split := c.replicas["api"]; split {
		ingestRole = "api"
		if _, ok := objs["Service/"+fullname+"-worker"]; !ok {
			t.Errorf("no Service of the workers' metrics")
		}
	}
	if got := str(objs["Service/"+fullname], "spec", "selector", "app.kubernetes.io/component"); got != ingestRole {
		t.Errorf("the Service selects %q, want %q", got, ingestRole)
	}

	checkPresent(t, objs, "PodDisruptionBudget/"+fullname+"-"+ingestRole, c.pdb)
	checkPresent(t, objs, "Ingress/"+fullname, c.ingress)
	checkPresent(t, objs, "ServiceMonitor/"+fullname, c.monitor)
	checkPresent(t, objs, "PrometheusRule/"+fullname, c.monitor)
	if c.ingress {
		ing := objs["Ingress/"+fullname]
		path := at(ing, "spec", "rules", 0, "http", "paths", 0)
		if str(path, "path") != "/webhooks/" || str(path, "backend", "service", "name") != fullname {
			t.Errorf("the Ingress routes %v, want /webhooks/ to %s", path, fullname)
		}
	}
	checkNetworkPolicy(t, c, objs, fullname)
	if c.monitor {
		if port := str(objs["ServiceMonitor/"+fullname], "spec", "endpoints", 0, "port"); port != "metrics" {
			t.Errorf("the ServiceMonitor scrapes port %q, want metrics", port)
		}
		var alerts map[string]any
		b, err := os.ReadFile(alertsFile)
		if err != nil {
			t.Fatal(err)
		}
		if err := yaml.Unmarshal(b, &alerts); err != nil {
			t.Fatal(err)
		}
		if got := at(objs["PrometheusRule/"+fullname], "spec", "groups"); !reflect.DeepEqual(got, alerts["groups"]) {
			t.Errorf("the PrometheusRule's groups differ from %s's", alertsFile)
		}
	}
}

// TestChartRefusesMissingValues: without the senders or the database's
// URL, helm template fails, naming the value.
func TestChartRefusesMissingValues(t *testing.T) {
	if os.Getenv(envHelm) == "" {
		t.Skip(envHelm + " is not set: make check-chart runs the chart's tests with Helm")
	}
	for _, c := range []struct{ args []string }{
		{[]string{"--set", "secrets.databaseUrl=postgres://h/db"}},                // no config
		{[]string{"--set", "config=senders: []"}},                                 // no database URL
		{[]string{"--set", "config=x", "--set", "secrets.create=false"}},          // no existingSecret
		{[]string{"--set", "config.senders=x", "--set", "secrets.databaseUrl=u"}}, // config as YAML
	} {
		_, err := helm(t, append([]string{"template", "hg", chartDir}, c.args...)...)
		if err == nil {
			t.Errorf("helm template %q: rendered, want an error", c.args)
			continue
		}
		if !regexp.MustCompile(`config|secrets\.`).MatchString(err.Error()) {
			t.Errorf("helm template %q: %v: names no value", c.args, err)
		}
	}
}

// checkNetworkPolicy checks the NetworkPolicy: none unless c.netpol, else
// the spec c.netpol gives (its ports, peers and policy types), whose pod
// selector selects the pods of every Deployment and of the migration Job.
func checkNetworkPolicy(t *testing.T, c chartCase, objs map[string]manifest, fullname string) {
	t.Helper()
	key := "NetworkPolicy/" + fullname
	checkPresent(t, objs, key, c.netpol != "")
	for k := range objs {
		if strings.HasPrefix(k, "NetworkPolicy/") && k != key {
			t.Errorf("%s rendered, want only %s", k, key)
		}
	}
	if c.netpol == "" {
		return
	}
	var want map[string]any
	if err := yaml.Unmarshal([]byte(c.netpol), &want); err != nil {
		t.Fatalf("the case's NetworkPolicy: %v", err)
	}
	got := at(objs[key], "spec")
	if !reflect.DeepEqual(got, want) {
		g, _ := yaml.Marshal(got)
		w, _ := yaml.Marshal(want)
		t.Errorf("the NetworkPolicy's spec is\n%s\nwant\n%s", g, w)
	}
	selector, _ := at(got, "podSelector", "matchLabels").(map[string]any)
	if len(selector) == 0 {
		t.Fatalf("the NetworkPolicy has no podSelector.matchLabels: it would select every pod of the namespace")
	}
	pods := map[string]any{}
	for k, o := range objs {
		if strings.HasPrefix(k, "Deployment/") || strings.HasPrefix(k, "Job/") {
			pods[k] = at(o, "spec", "template", "metadata", "labels")
		}
	}
	for k, labels := range pods {
		for name, value := range selector {
			if at(labels, name) != value {
				t.Errorf("the NetworkPolicy does not select the pods of %s: label %s is %v, want %v", k, name, at(labels, name), value)
			}
		}
	}
}

func checkPresent(t *testing.T, objs map[string]manifest, key string, want bool) {
	t.Helper()
	if _, ok := objs[key]; ok != want {
		t.Errorf("%s rendered: %v, want %v", key, ok, want)
	}
}

// checkSecure checks the pod's and the container's security contexts:
// non-root (the image's 65532), a read-only root file system, no
// privilege escalation, no capabilities.
func checkSecure(t *testing.T, role string, pod, ctr any) {
	t.Helper()
	if at(pod, "securityContext", "runAsNonRoot") != true || at(pod, "securityContext", "runAsUser") != 65532 {
		t.Errorf("%s: pod securityContext %v, want runAsNonRoot and runAsUser 65532", role, at(pod, "securityContext"))
	}
	sc := at(ctr, "securityContext")
	if at(sc, "readOnlyRootFilesystem") != true || at(sc, "allowPrivilegeEscalation") != false ||
		!slices.Equal(strs(at(sc, "capabilities", "drop")), []string{"ALL"}) {
		t.Errorf("%s: container securityContext %v, want a read-only root, no privilege escalation, capabilities dropped", role, sc)
	}
	if at(pod, "automountServiceAccountToken") != false {
		t.Errorf("%s: the service account's token is mounted (hookgate needs no Kubernetes API)", role)
	}
}

// envVar is a container's variable: a value, or a Secret's key.
type envVar struct {
	value, secret, key string
	optional           bool
}

func envOf(ctr any) map[string]envVar {
	env := map[string]envVar{}
	list, _ := at(ctr, "env").([]any)
	for _, e := range list {
		ref := at(e, "valueFrom", "secretKeyRef")
		opt, _ := at(ref, "optional").(bool)
		env[str(e, "name")] = envVar{value: str(e, "value"), secret: str(ref, "name"), key: str(ref, "key"), optional: opt}
	}
	return env
}

func checkSecretRef(t *testing.T, role string, env map[string]envVar, name, secret, key string, optional bool) {
	t.Helper()
	if got, want := env[name], (envVar{secret: secret, key: key, optional: optional}); got != want {
		t.Errorf("%s: %s is %+v, want Secret %s key %s (optional %v)", role, name, got, secret, key, optional)
	}
}

func strs(v any) []string {
	l, _ := v.([]any)
	var out []string
	for _, e := range l {
		s, _ := e.(string)
		out = append(out, s)
	}
	return out
}

// docsTable returns the rows of the table of docs/deployment.md whose
// header line is header, each cell without its backticks.
func docsTable(t *testing.T, header string) [][]string {
	t.Helper()
	b, err := os.ReadFile(docsFile)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(string(b), "\n")
	i := slices.Index(lines, header)
	if i < 0 {
		t.Fatalf("%s has no table headed %q", docsFile, header)
	}
	var rows [][]string
	for _, line := range lines[i+2:] {
		if !strings.HasPrefix(line, "|") {
			break
		}
		var cells []string
		for _, c := range strings.Split(strings.Trim(line, "|"), "|") {
			cells = append(cells, strings.TrimSpace(strings.ReplaceAll(c, "`", "")))
		}
		rows = append(rows, cells)
	}
	if len(rows) == 0 {
		t.Fatalf("%s: the table headed %q has no rows", docsFile, header)
	}
	return rows
}
