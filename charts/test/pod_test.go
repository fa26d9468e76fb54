package charttest

import (
	"reflect"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/nora-breaker/nora-breaker/cli"
)

// TestSpread: more than one replica spreads softly across nodes and zones
// by default, in both modes; constraints given in values are rendered in
// both modes and get the pods' own selector when they name none.
func TestSpread(t *testing.T) {
	rwx := []string{"--set", "mode=nora", "--set", "nora.replicaCount=2", "--set", "nora.persistence.accessModes={ReadWriteMany}"}
	own := `topologySpreadConstraints=[{"maxSkew":2,"topologyKey":"kubernetes.io/hostname","whenUnsatisfiable":"DoNotSchedule"}]`
	for _, tc := range []struct {
		name       string
		args       []string
		want       []string // topology keys
		wantSkew   int32
		whenUnsat  corev1.UnsatisfiableConstraintAction
		wantLabels string // the pod label every constraint must select on
	}{
		{"standalone default", nil, []string{"kubernetes.io/hostname", "topology.kubernetes.io/zone"}, 1, corev1.ScheduleAnyway, "proxy"},
		{"one replica", []string{"--set", "replicaCount=1"}, nil, 0, "", ""},
		{"switched off", []string{"--set", "defaultSpread=false"}, nil, 0, "", ""},
		{"nora with two replicas", rwx, []string{"kubernetes.io/hostname", "topology.kubernetes.io/zone"}, 1, corev1.ScheduleAnyway, "nora"},
		{"nora, one replica", []string{"--set", "mode=nora"}, nil, 0, "", ""},
		{"own constraint, standalone", []string{"--set-json", own}, []string{"kubernetes.io/hostname"}, 2, corev1.DoNotSchedule, "proxy"},
		{"own constraint, nora", []string{"--set", "mode=nora", "--set-json", own}, []string{"kubernetes.io/hostname"}, 2, corev1.DoNotSchedule, "nora"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := render(t, tc.args...).theDeployment(t)
			got := d.Spec.Template.Spec.TopologySpreadConstraints
			var keys []string
			for _, c := range got {
				keys = append(keys, c.TopologyKey)
				if c.MaxSkew != tc.wantSkew || c.WhenUnsatisfiable != tc.whenUnsat {
					t.Errorf("constraint %+v, want maxSkew %d and %s", c, tc.wantSkew, tc.whenUnsat)
				}
				if c.LabelSelector == nil || !reflect.DeepEqual(c.LabelSelector.MatchLabels, d.Spec.Selector.MatchLabels) {
					t.Errorf("constraint on %s does not select the Deployment's pods: %+v", c.TopologyKey, c.LabelSelector)
				}
				if c.LabelSelector != nil && c.LabelSelector.MatchLabels["app.kubernetes.io/component"] != tc.wantLabels {
					t.Errorf("constraint selects component %q, want %q", c.LabelSelector.MatchLabels["app.kubernetes.io/component"], tc.wantLabels)
				}
			}
			if !slices.Equal(keys, tc.want) {
				t.Errorf("spread over %v, want %v", keys, tc.want)
			}
		})
	}
}

// TestPreStopKeepsAccepting: the shared proxy sleeps in preStop with its
// own binary (the image has no shell) before SIGTERM starts its 25 s drain,
// and the grace period covers both. The native sidecar of mode nora has no
// such hook: it is stopped after NORA, which is its only client.
func TestPreStopKeepsAccepting(t *testing.T) {
	d := render(t).theDeployment(t)
	spec := &d.Spec.Template.Spec
	c := &spec.Containers[0]
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil || c.Lifecycle.PreStop.Exec == nil {
		t.Fatalf("no preStop exec hook: %+v", c.Lifecycle)
	}
	cmd := c.Lifecycle.PreStop.Exec.Command
	if len(cmd) != 3 || cmd[0] != "/nora-breaker" || cmd[1] != "sleep" {
		t.Fatalf("preStop %q, want /nora-breaker sleep N", cmd)
	}
	delay, err := cli.ParseSleep(cmd[2])
	if err != nil || delay != 5*time.Second {
		t.Fatalf("preStop delay %q: %v, %v; want 5s", cmd[2], delay, err)
	}
	const drain = 25 * time.Second
	if grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second; grace <= delay+drain {
		t.Errorf("terminationGracePeriodSeconds %s leaves no time after the %s preStop and the %s drain", grace, delay, drain)
	}
	if custom := render(t, "--set-json", `sidecar.lifecycle={"preStop":{"sleep":{"seconds":2}}}`).theDeployment(t); !reflect.DeepEqual(
		custom.Spec.Template.Spec.Containers[0].Lifecycle.PreStop.Sleep, &corev1.SleepAction{Seconds: 2}) {
		t.Errorf("sidecar.lifecycle does not replace the default hook: %+v", custom.Spec.Template.Spec.Containers[0].Lifecycle)
	}
	nora := render(t, "--set", "mode=nora").theDeployment(t)
	_, side := findContainer(nora.Spec.Template.Spec.InitContainers, sidecarName)
	if side.Lifecycle != nil {
		t.Errorf("the native sidecar has lifecycle hooks: %+v", side.Lifecycle)
	}
}

// TestGoMemLimit: GOMEMLIMIT is goMemLimitPercent of the proxy's memory
// limit in bytes, in whatever unit the limit is written, and absent without
// a limit, at 0 percent, or when the environment already sets it.
func TestGoMemLimit(t *testing.T) {
	for _, tc := range []struct {
		name string
		args []string
		want string // "" = not set
	}{
		{"default 90% of 256Mi", nil, "241591910"},
		{"1Gi", []string{"--set", "sidecar.resources.limits.memory=1Gi"}, "966367641"},
		{"decimal 500M", []string{"--set", "sidecar.resources.limits.memory=500M"}, "450000000"},
		{"plain bytes", []string{"--set-json", "sidecar.resources.limits.memory=268435456"}, "241591910"},
		{"fraction 1.5Gi at 80%", []string{"--set", "sidecar.resources.limits.memory=1.5Gi", "--set", "sidecar.goMemLimitPercent=80"}, "1288490188"},
		{"no limit", []string{"--set", "sidecar.resources.limits=null"}, ""},
		{"off", []string{"--set", "sidecar.goMemLimitPercent=0"}, ""},
		{"set by the user", []string{"--set-json", `sidecar.extraEnv=[{"name":"GOMEMLIMIT","value":"100MiB"}]`}, "100MiB"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &render(t, tc.args...).theDeployment(t).Spec.Template.Spec.Containers[0]
			var values []string
			for _, e := range c.Env {
				if e.Name == "GOMEMLIMIT" {
					values = append(values, e.Value)
				}
			}
			want := []string{tc.want}
			if tc.want == "" {
				want = nil
			}
			if !slices.Equal(values, want) {
				t.Errorf("GOMEMLIMIT %q, want %q", values, want)
			}
		})
	}
}

// TestPodOverrides: the knobs a platform team expects on a Deployment reach
// it: extra volumes and mounts, revision history, strategy, lifecycle of
// NORA, common labels on every object and never in a selector.
func TestPodOverrides(t *testing.T) {
	vol := `extraVolumes=[{"name":"corp-roots","configMap":{"name":"corp-roots"}}]`
	mount := `sidecar.extraVolumeMounts=[{"name":"corp-roots","mountPath":"/etc/corp"}]`
	r := render(t, "--set-json", vol, "--set-json", mount, "--set", "revisionHistoryLimit=3",
		"--set-json", `strategy={"type":"RollingUpdate","rollingUpdate":{"maxUnavailable":0,"maxSurge":1}}`,
		"--set", "commonLabels.team=platform", "--set", "deploymentAnnotations.reload=corp-ca")
	d := r.theDeployment(t)
	if d.Annotations["reload"] != "corp-ca" || d.Spec.Template.Annotations["reload"] != "" {
		t.Errorf("deploymentAnnotations belong on the Deployment only: %v, pods %v", d.Annotations, d.Spec.Template.Annotations)
	}
	if volume(&d.Spec.Template.Spec, "corp-roots") == nil {
		t.Error("extraVolumes not in the pod")
	}
	if m, ok := mountFor(&d.Spec.Template.Spec.Containers[0], "/etc/corp/x"); !ok || m.Name != "corp-roots" {
		t.Error("sidecar.extraVolumeMounts not on the proxy")
	}
	if d.Spec.RevisionHistoryLimit == nil || *d.Spec.RevisionHistoryLimit != 3 {
		t.Errorf("revisionHistoryLimit %v, want 3", d.Spec.RevisionHistoryLimit)
	}
	if u := d.Spec.Strategy.RollingUpdate; u == nil || *u.MaxUnavailable != intstr.FromInt32(0) {
		t.Errorf("strategy %+v, want the one given", d.Spec.Strategy)
	}
	labelled := map[string]map[string]string{"Deployment": d.Labels, "pod template": d.Spec.Template.Labels}
	for name, o := range r.Services {
		labelled["Service "+name] = o.Labels
		if _, ok := o.Spec.Selector["team"]; ok {
			t.Errorf("Service %s selects on a common label", name)
		}
	}
	for name, o := range r.ConfigMaps {
		labelled["ConfigMap "+name] = o.Labels
	}
	for name, o := range r.Secrets {
		labelled["Secret "+name] = o.Labels
	}
	for name, o := range r.ServiceAccounts {
		labelled["ServiceAccount "+name] = o.Labels
	}
	for name, o := range r.Pods {
		labelled["test Pod "+name] = o.Labels
	}
	for _, np := range r.NetworkPolicies {
		labelled["NetworkPolicy "+np.Name] = np.Labels
	}
	for what, labels := range labelled {
		if labels["team"] != "platform" {
			t.Errorf("%s lacks the common label: %v", what, labels)
		}
	}
	if _, ok := d.Spec.Selector.MatchLabels["team"]; ok {
		t.Error("the Deployment selects on a common label (selectors cannot change on an existing release)")
	}

	n := render(t, "--set", "mode=nora", "--set-json", vol,
		"--set-json", `nora.extraVolumeMounts=[{"name":"corp-roots","mountPath":"/etc/corp"}]`,
		"--set-json", `nora.lifecycle={"preStop":{"sleep":{"seconds":3}}}`,
		"--set-json", `nora.strategy={"type":"RollingUpdate"}`).theDeployment(t)
	_, noraC := findContainer(n.Spec.Template.Spec.Containers, "nora")
	if m, ok := mountFor(noraC, "/etc/corp/x"); !ok || m.Name != "corp-roots" {
		t.Error("nora.extraVolumeMounts not on NORA")
	}
	if noraC.Lifecycle == nil || noraC.Lifecycle.PreStop == nil || noraC.Lifecycle.PreStop.Sleep == nil {
		t.Errorf("nora.lifecycle not on NORA: %+v", noraC.Lifecycle)
	}
	if n.Spec.Strategy.Type != "RollingUpdate" {
		t.Errorf("nora.strategy %+v not used", n.Spec.Strategy)
	}
}

// TestServiceAccount: the pods run under a ServiceAccount of the release's
// own, which mounts no token, or under the one named.
func TestServiceAccount(t *testing.T) {
	r := render(t)
	sa, ok := r.ServiceAccounts[fullname]
	if !ok || sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken {
		t.Fatalf("ServiceAccount %s missing or mounting a token: %+v", fullname, sa)
	}
	if got := r.theDeployment(t).Spec.Template.Spec.ServiceAccountName; got != fullname {
		t.Errorf("pods run as %q, want %s", got, fullname)
	}
	r = render(t, "--set", "serviceAccount.create=false", "--set", "serviceAccount.name=ci-proxy")
	if len(r.ServiceAccounts) != 0 {
		t.Error("a ServiceAccount was created although create is false")
	}
	if got := r.theDeployment(t).Spec.Template.Spec.ServiceAccountName; got != "ci-proxy" {
		t.Errorf("pods run as %q, want ci-proxy", got)
	}
}

// TestPDBBounds: minAvailable by default, maxUnavailable instead when asked.
func TestPDBBounds(t *testing.T) {
	pdb := render(t).PDBs[0].Spec
	if pdb.MinAvailable == nil || pdb.MinAvailable.IntValue() != 1 || pdb.MaxUnavailable != nil {
		t.Errorf("default PDB %+v, want minAvailable 1", pdb)
	}
	pdb = render(t, "--set", "pdb.minAvailable=null", "--set", "pdb.maxUnavailable=50%").PDBs[0].Spec
	if pdb.MaxUnavailable == nil || pdb.MaxUnavailable.String() != "50%" || pdb.MinAvailable != nil {
		t.Errorf("PDB %+v, want maxUnavailable 50%%", pdb)
	}
}

// TestNoraDefaults: mode nora starts with NORA's own chart's defaults: its
// resources, and its data on a claim (so a pod restart keeps the cache),
// replaced with Recreate because the claim is ReadWriteOnce.
func TestNoraDefaults(t *testing.T) {
	r := render(t, "--set", "mode=nora")
	d := r.theDeployment(t)
	_, nora := findContainer(d.Spec.Template.Spec.Containers, "nora")
	res := nora.Resources
	if res.Requests.Cpu().String() != "100m" || res.Requests.Memory().String() != "128Mi" || res.Limits.Memory().String() != "512Mi" {
		t.Errorf("NORA resources %+v, want 100m/128Mi requests and a 512Mi limit", res)
	}
	if len(r.PVCs) != 1 || volume(&d.Spec.Template.Spec, "data").PersistentVolumeClaim == nil {
		t.Errorf("NORA's data is not on a claim by default (%d claims)", len(r.PVCs))
	}
	if d.Spec.Strategy.Type != "Recreate" {
		t.Errorf("strategy %q with a ReadWriteOnce claim, want Recreate", d.Spec.Strategy.Type)
	}
}
