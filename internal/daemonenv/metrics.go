package daemonenv

import (
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"

	"cdplane/internal/plane"
)

// The daemon's metrics endpoint as the controller turns it on: flags of `cdplane-daemon run` and
// the container port, written by the controller into the daemon DaemonSet and read by the
// daemon.
const (
	// MetricsBindAddressFlag is the endpoint's host:port ("0": off).
	MetricsBindAddressFlag = "metrics-bind-address"
	// ControlPlaneIDFlag is the plane the daemon's metrics are labelled with.
	ControlPlaneIDFlag = plane.FlagName
	// MetricsPortName names the container port of the endpoint (the chart's PodMonitor scrapes
	// the port of that name).
	MetricsPortName = "metrics"
)

// Ports IMEX listens on in the daemon pod's network namespace (its SERVER_PORT and
// IMEX_CMD_PORT, as the daemon writes them): no other endpoint of the pod may take them.
const (
	IMEXServerPort  = 50000
	IMEXCommandPort = 50005
)

// Metrics is the daemon container's metrics endpoint: Port on the pod's IP (0: off), its series
// labelled with ControlPlaneID.
type Metrics struct {
	Port           int32
	ControlPlaneID string
}

// Args are the daemon container's arguments: --metrics-bind-address=$(POD_IP):<port> (the pod's
// IP from its environment, so that daemons sharing a host's addresses, as in-process daemons of
// a simulated cluster do, never share a socket), and --control-plane-id for a plane with an id
// (the legacy plane's daemons carry no trace of the feature). None when the endpoint is off.
func (m Metrics) Args() []string {
	if m.Port == 0 {
		return nil
	}
	args := []string{fmt.Sprintf("--%s=$(%s):%d", MetricsBindAddressFlag, PodIP, m.Port)}
	if m.ControlPlaneID != "" {
		args = append(args, fmt.Sprintf("--%s=%s", ControlPlaneIDFlag, m.ControlPlaneID))
	}
	return args
}

// Ports are the daemon container's ports: the endpoint's, named MetricsPortName; none when off.
func (m Metrics) Ports() []corev1.ContainerPort {
	if m.Port == 0 {
		return nil
	}
	return []corev1.ContainerPort{{Name: MetricsPortName, ContainerPort: m.Port}}
}

// ValidateMetricsPort checks a port of the daemons' metrics endpoint: 0 (off), or a port number
// that is not IMEX's. what names the setting in the error.
func ValidateMetricsPort(what string, port int) error {
	switch {
	case port < 0 || port > 65535:
		return fmt.Errorf("%s %d: want a port number up to 65535, or 0 (off)", what, port)
	case port == IMEXServerPort || port == IMEXCommandPort:
		return fmt.Errorf("%s %d: the port is IMEX's, in the daemon pod (%d: its peers, %d: its command service)", what, port, IMEXServerPort, IMEXCommandPort)
	}
	return nil
}

// ValidateMetricsBindAddressPort checks the port of a --metrics-bind-address (host:port).
func ValidateMetricsBindAddressPort(addr, port string) error {
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("--%s %q: port %q is not a port number", MetricsBindAddressFlag, addr, port)
	}
	return ValidateMetricsPort("--"+MetricsBindAddressFlag+" "+strconv.Quote(addr)+": port", n)
}
