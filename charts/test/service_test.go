package charttest

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

func portNames(s *corev1.Service) []string {
	var names []string
	for _, p := range s.Spec.Ports {
		names = append(names, p.Name)
	}
	return names
}

// TestAdminPortStaysInside: a LoadBalancer or NodePort Service carries only
// the client port; the admin port (breaker control, the status page) moves
// to a ClusterIP Service the ServiceMonitor still finds by port name.
// exposeAdminPort puts it back; loadBalancerSourceRanges reach the Service.
func TestAdminPortStaysInside(t *testing.T) {
	for _, tc := range []struct {
		name      string
		args      []string
		main      []string
		separate  bool
		lbSources []string
	}{
		{"ClusterIP", nil, []string{"proxy", "metrics"}, false, nil},
		{"LoadBalancer", []string{"--set", "service.type=LoadBalancer", "--set", "service.loadBalancerSourceRanges={10.0.0.0/8}"},
			[]string{"proxy"}, true, []string{"10.0.0.0/8"}},
		{"NodePort", []string{"--set", "service.type=NodePort"}, []string{"proxy"}, true, nil},
		{"LoadBalancer, nora", []string{"--set", "mode=nora", "--set", "service.type=LoadBalancer"}, []string{"http"}, true, nil},
		{"LoadBalancer, admin port asked for", []string{"--set", "service.type=LoadBalancer", "--set", "service.exposeAdminPort=true"},
			[]string{"proxy", "metrics"}, false, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := render(t, append(tc.args, "--set", "metrics.serviceMonitor.enabled=true")...)
			main := r.Services[fullname]
			if main == nil || !slices.Equal(portNames(main), tc.main) {
				t.Fatalf("Service %s ports %v, want %v", fullname, portNames(main), tc.main)
			}
			if !slices.Equal(main.Spec.LoadBalancerSourceRanges, tc.lbSources) {
				t.Errorf("loadBalancerSourceRanges %v, want %v", main.Spec.LoadBalancerSourceRanges, tc.lbSources)
			}
			metrics, ok := r.Services[fullname+"-metrics"]
			if ok != tc.separate {
				t.Fatalf("separate metrics Service: %t, want %t", ok, tc.separate)
			}
			if ok && (metrics.Spec.Type != corev1.ServiceTypeClusterIP || !slices.Equal(portNames(metrics), []string{"metrics"})) {
				t.Errorf("metrics Service %s with ports %v, want a ClusterIP with metrics only", metrics.Spec.Type, portNames(metrics))
			}
			// The ServiceMonitor selects every Service of the release and
			// scrapes the port named metrics: whichever Service has it.
			sm := r.ServiceMonitors[0]
			for name, s := range r.Services {
				for k, v := range sm.Spec.Selector.MatchLabels {
					if s.Labels[k] != v {
						t.Errorf("the ServiceMonitor does not select Service %s", name)
					}
				}
			}
		})
	}
}
