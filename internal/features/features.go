// Package features defines cdplane's feature gates on k8s.io/component-base/featuregate.
package features

import (
	"fmt"

	"k8s.io/component-base/featuregate"
	logsapi "k8s.io/component-base/logs/api/v1"
)

const (
	// ComputeDomainCliques keeps daemon membership in ComputeDomainClique objects, one per clique,
	// with ComputeDomain.status.nodes as their aggregate. Off: membership lives in status.nodes.
	ComputeDomainCliques featuregate.Feature = "ComputeDomainCliques"

	// IMEXDaemonsWithDNSNames makes nodes.cfg list static names (compute-domain-daemon-%04d by
	// index) resolved through a hosts file of peer IPs, so nodes.cfg never changes. Off: nodes.cfg
	// lists peer IPs. Required by ComputeDomainCliques.
	IMEXDaemonsWithDNSNames featuregate.Feature = "IMEXDaemonsWithDNSNames"

	// CrashOnNVLinkFabricErrors makes a failed NVLink fabric registration fatal for the component
	// that discovers it, instead of an error it reports and retries.
	CrashOnNVLinkFabricErrors featuregate.Feature = "CrashOnNVLinkFabricErrors"

	// HostManagedIMEXDaemon allows --imex-mode=hostManaged, where the cluster's administrator
	// runs nvidia-imex as a host service: no daemon DaemonSets, the plugin checks the host
	// daemon's readiness. The gate alone changes nothing.
	HostManagedIMEXDaemon featuregate.Feature = "HostManagedIMEXDaemon"
)

// Specs lists every gate with its default and maturity.
var Specs = map[featuregate.Feature]featuregate.FeatureSpec{
	ComputeDomainCliques:      {Default: true, PreRelease: featuregate.Beta},
	IMEXDaemonsWithDNSNames:   {Default: true, PreRelease: featuregate.Beta},
	CrashOnNVLinkFabricErrors: {Default: true, PreRelease: featuregate.Beta},
	HostManagedIMEXDaemon:     {Default: false, PreRelease: featuregate.Alpha},
}

// NewGates returns a gate set with every cdplane gate at its default.
func NewGates() featuregate.MutableFeatureGate {
	g := featuregate.NewFeatureGate()
	if err := g.Add(Specs); err != nil {
		panic(fmt.Sprintf("registering feature gates: %v", err))
	}
	// The logging options of component-base are gated too.
	if err := logsapi.AddFeatureGates(g); err != nil {
		panic(fmt.Sprintf("registering logging feature gates: %v", err))
	}
	return g
}

// Validate returns an error naming the gates when their combination is invalid.
func Validate(g featuregate.FeatureGate) error {
	if g.Enabled(ComputeDomainCliques) && !g.Enabled(IMEXDaemonsWithDNSNames) {
		return fmt.Errorf("invalid feature gates: %s=true requires %s=true", ComputeDomainCliques, IMEXDaemonsWithDNSNames)
	}
	return nil
}

// IMEXMode says who runs the IMEX daemons of a plane's nodes.
type IMEXMode string

const (
	// IMEXDriverManaged (the default): cdplane runs one daemon DaemonSet per ComputeDomain.
	IMEXDriverManaged IMEXMode = "driverManaged"
	// IMEXHostManaged means the administrator runs nvidia-imex as a host service on every
	// node, and cdplane only injects channels after checking the host daemon's readiness.
	// Requires the HostManagedIMEXDaemon gate.
	IMEXHostManaged IMEXMode = "hostManaged"
)

// ParseIMEXMode checks an --imex-mode value against the gates; "" is driverManaged.
func ParseIMEXMode(s string, g featuregate.FeatureGate) (IMEXMode, error) {
	switch IMEXMode(s) {
	case "", IMEXDriverManaged:
		return IMEXDriverManaged, nil
	case IMEXHostManaged:
		if !g.Enabled(HostManagedIMEXDaemon) {
			return "", fmt.Errorf("--imex-mode=%s requires the feature gate %s=true", IMEXHostManaged, HostManagedIMEXDaemon)
		}
		return IMEXHostManaged, nil
	}
	return "", fmt.Errorf("--imex-mode %q: want %s or %s", s, IMEXDriverManaged, IMEXHostManaged)
}

// NewGatesForTest returns a gate set at the defaults with the given gates set, failing the test
// on an unknown gate. Every component takes its gates as an option, so tests flip a gate for one
// instance, not for the process.
func NewGatesForTest(t interface {
	Helper()
	Fatalf(string, ...any)
}, set map[featuregate.Feature]bool) featuregate.MutableFeatureGate {
	t.Helper()
	g := NewGates()
	m := map[string]bool{}
	for f, v := range set {
		m[string(f)] = v
	}
	if err := g.SetFromMap(m); err != nil {
		t.Fatalf("setting feature gates %v: %v", set, err)
	}
	return g
}

// daemonGates are the gates the daemons read. ComputeDomainCliques tells a daemon where to look
// for its entry first: with it on, the daemon waits for its clique object instead of also
// watching the domain, whose status every daemon of a large domain would otherwise receive on
// every change (see daemon.Config.Cliques). A domain's DaemonSet keeps the value it was
// created with, so a flip never changes a live DaemonSet; its daemons follow the flip either
// way (a daemon whose clique goes reads the domain's status).
var daemonGates = []featuregate.Feature{IMEXDaemonsWithDNSNames, CrashOnNVLinkFabricErrors, ComputeDomainCliques}

// DaemonGates renders the daemon-relevant gates of g as a --feature-gates value.
func DaemonGates(g featuregate.FeatureGate) string {
	out := ""
	for i, f := range daemonGates {
		if i > 0 {
			out += ","
		}
		out += fmt.Sprintf("%s=%t", f, g.Enabled(f))
	}
	return out
}
