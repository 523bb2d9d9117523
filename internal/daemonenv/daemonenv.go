// Package daemonenv is the compute-domain daemon's environment as one typed contract: the
// controller writes Pod into the daemon DaemonSet's container, the kubelet plugin writes Claim
// through the daemon claim's CDI edits, and the daemon reads both with Read. Each variable's
// name is written only here, so that renaming one changes every writer and the reader at once.
package daemonenv

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"

	cdv1beta1 "cdplane/api/v1beta1"
)

// Names of the variables.
const (
	NodeName              = "NODE_NAME"
	PodIP                 = "POD_IP"
	PodName               = "POD_NAME"
	PodNamespace          = "POD_NAMESPACE"
	PodUID                = "POD_UID"
	DomainUID             = "COMPUTE_DOMAIN_UUID"
	DomainName            = "COMPUTE_DOMAIN_NAME"
	DomainNamespace       = "COMPUTE_DOMAIN_NAMESPACE"
	CliqueID              = "CLIQUE_ID"
	MaxNodesPerIMEXDomain = "MAX_NODES_PER_IMEX_DOMAIN"
	LogVerbosity          = "LOG_VERBOSITY"
	FeatureGates          = "FEATURE_GATES"
	IMEXConfigDir         = "IMEX_CONFIG_DIR"
	HostsFile             = "IMEX_HOSTS_FILE"
	// DriverVersion is the node's loaded NVIDIA kernel driver version, as the kubelet plugin
	// read it: IMEX of drivers before imex.HostnamesMinDriverVersion takes addresses only.
	DriverVersion = "NVIDIA_KERNEL_DRIVER_VERSION"
	// FabricError says why a node serves without a fabric although it has GPUs with one: its
	// NVLink fabric registration failed (CrashOnNVLinkFabricErrors off); empty otherwise.
	FabricError = "NVLINK_FABRIC_ERROR"
	// HostIMEXService names the evidence the kubelet plugin found, in the driver root, of an
	// nvidia-imex host service enabled on the node (its systemd unit link); empty when none.
	// The daemon names it when IMEX cannot get the node's session.
	HostIMEXService = "NVIDIA_HOST_IMEX_SERVICE"
	// IMEXBinary, IMEXCtlBinary and NVMLLibrary are where the host driver's files were mounted
	// into the daemon container (the daemon's --imex-binary, --imex-ctl-binary and
	// --nvml-library defaults).
	IMEXBinary    = "IMEX_BINARY"
	IMEXCtlBinary = "IMEX_CTL_BINARY"
	NVMLLibrary   = "NVML_LIBRARY"
	// LibraryPath is the loader's search path: the directory of the driver libraries mounted
	// into the daemon container, which nvidia-imex and the NVML library link.
	LibraryPath = "LD_LIBRARY_PATH"
	// NvidiaVisibleDevices=void tells an NVIDIA container runtime to give the container no GPU.
	NvidiaVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	// VisibleDevicesNone is the NvidiaVisibleDevices value of daemon containers.
	VisibleDevicesNone = "void"
)

// Pod is what the controller sets on the daemon container: the pod's identity from the downward
// API, the domain, and the daemon's settings.
type Pod struct {
	DomainUID, DomainName, DomainNamespace string
	MaxNodesPerIMEXDomain                  int
	LogVerbosity                           int
	// FeatureGates is a --feature-gates value; empty: not set.
	FeatureGates string
	// HostsFile is where the daemon writes peer names (cdv1beta1.DaemonHostsFile).
	HostsFile string
}

// EnvVars are the container's environment entries.
func (p Pod) EnvVars() []corev1.EnvVar {
	field := func(name, path string) corev1.EnvVar {
		return corev1.EnvVar{Name: name, ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: path}}}
	}
	env := []corev1.EnvVar{
		field(NodeName, "spec.nodeName"),
		field(PodIP, "status.podIP"),
		field(PodName, "metadata.name"),
		field(PodNamespace, "metadata.namespace"),
		field(PodUID, "metadata.uid"),
		{Name: DomainUID, Value: p.DomainUID},
		{Name: DomainName, Value: p.DomainName},
		{Name: DomainNamespace, Value: p.DomainNamespace},
		{Name: MaxNodesPerIMEXDomain, Value: strconv.Itoa(p.MaxNodesPerIMEXDomain)},
		{Name: LogVerbosity, Value: strconv.Itoa(p.LogVerbosity)},
	}
	if p.HostsFile != "" {
		env = append(env, corev1.EnvVar{Name: HostsFile, Value: p.HostsFile})
	}
	if p.FeatureGates != "" {
		env = append(env, corev1.EnvVar{Name: FeatureGates, Value: p.FeatureGates})
	}
	return env
}

// Claim is what the kubelet plugin adds when it prepares a daemon claim: the node's clique (it
// discovered it), the domain, and where it mounted the domain's IMEX config directory.
type Claim struct {
	// CliqueID is "<clusterUUID>.<cliqueId>", or empty on a node without an NVLink fabric.
	CliqueID                               string
	DomainUID, DomainName, DomainNamespace string
	// IMEXConfigDir is the container path of the config directory (cdv1beta1.DaemonIMEXConfigDir).
	IMEXConfigDir string
	// IMEXBinary, IMEXCtlBinary and NVMLLibrary are the container paths of the host driver's
	// files; each is left out when empty (NVMLLibrary when the driver root has none).
	IMEXBinary, IMEXCtlBinary, NVMLLibrary string
	// LibraryPath is LD_LIBRARY_PATH; left out when empty.
	LibraryPath string
	// NoGPUs sets NVIDIA_VISIBLE_DEVICES=void, so that an NVIDIA container runtime gives the
	// daemon container no GPU.
	NoGPUs bool
	// DriverVersion is the node's kernel driver version; left out when empty (not known).
	DriverVersion string
	// FabricError is the failed fabric registration's error, left out when empty.
	FabricError string
	// HostIMEXService is the host IMEX service's evidence, left out when empty.
	HostIMEXService string
}

// Environ returns the entries as NAME=value, as CDI container edits carry them.
func (c Claim) Environ() []string {
	env := []string{
		CliqueID + "=" + c.CliqueID,
		DomainUID + "=" + c.DomainUID,
		DomainName + "=" + c.DomainName,
		DomainNamespace + "=" + c.DomainNamespace,
		IMEXConfigDir + "=" + c.IMEXConfigDir,
	}
	if c.NoGPUs {
		env = append(env, NvidiaVisibleDevices+"="+VisibleDevicesNone)
	}
	for _, v := range []struct{ name, value string }{{IMEXBinary, c.IMEXBinary}, {IMEXCtlBinary, c.IMEXCtlBinary}, {NVMLLibrary, c.NVMLLibrary}, {LibraryPath, c.LibraryPath}, {DriverVersion, c.DriverVersion}, {FabricError, c.FabricError}, {HostIMEXService, c.HostIMEXService}} {
		if v.value != "" {
			env = append(env, v.name+"="+v.value)
		}
	}
	return env
}

// Env is everything a daemon reads from its environment.
type Env struct {
	NodeName, PodIP, PodName, PodNamespace, PodUID string
	DomainUID, DomainName, DomainNamespace         string
	// CliqueID is the node's clique; CliqueIDSet says whether the variable was present (empty
	// means no fabric; absent means the daemon must discover the clique itself).
	CliqueID    string
	CliqueIDSet bool
	// MaxNodesPerIMEXDomain: cdv1beta1.DefaultMaxNodesPerIMEXDomain when unset.
	MaxNodesPerIMEXDomain int
	LogVerbosity          int
	FeatureGates          string
	// IMEXConfigDir and HostsFile: cdv1beta1.DaemonIMEXConfigDir and DaemonHostsFile when unset.
	IMEXConfigDir, HostsFile string
	// DriverVersion is the node's kernel driver version; empty when not known.
	DriverVersion string
	// FabricError is why the node serves without a fabric; empty when it does not.
	FabricError string
	// HostIMEXService is the evidence of a host IMEX service on the node; empty: none found.
	HostIMEXService string
}

// required are the variables a daemon cannot run without, each with what it carries.
var required = []struct{ name, what string }{
	{NodeName, "the node's name (downward API spec.nodeName)"},
	{PodIP, "the pod's IP (downward API status.podIP)"},
	{PodName, "the pod's name (downward API metadata.name)"},
	{PodNamespace, "the pod's namespace (downward API metadata.namespace)"},
	{PodUID, "the pod's UID (downward API metadata.uid)"},
	{DomainUID, "the ComputeDomain's UID"},
	{DomainName, "the ComputeDomain's name"},
	{DomainNamespace, "the ComputeDomain's namespace"},
}

// Read reads the environment through lookup (os.LookupEnv in a process). A missing required
// variable, or a malformed number, is an error naming the variable.
func Read(lookup func(string) (string, bool)) (Env, error) {
	get := func(name string) string { v, _ := lookup(name); return strings.TrimSpace(v) }
	for _, v := range required {
		if get(v.name) == "" {
			return Env{}, fmt.Errorf("environment variable %s is not set: it must hold %s", v.name, v.what)
		}
	}
	e := Env{
		NodeName: get(NodeName), PodIP: get(PodIP), PodName: get(PodName), PodNamespace: get(PodNamespace), PodUID: get(PodUID),
		DomainUID: get(DomainUID), DomainName: get(DomainName), DomainNamespace: get(DomainNamespace),
		MaxNodesPerIMEXDomain: cdv1beta1.DefaultMaxNodesPerIMEXDomain,
		FeatureGates:          get(FeatureGates),
		DriverVersion:         get(DriverVersion),
		FabricError:           get(FabricError),
		HostIMEXService:       get(HostIMEXService),
		IMEXConfigDir:         cdv1beta1.DaemonIMEXConfigDir,
		HostsFile:             cdv1beta1.DaemonHostsFile,
	}
	if clique, ok := lookup(CliqueID); ok {
		e.CliqueID, e.CliqueIDSet = strings.TrimSpace(clique), true
	}
	if v := get(MaxNodesPerIMEXDomain); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > cdv1beta1.MaxDaemonsPerClique {
			return Env{}, fmt.Errorf("%s=%q: want an integer between 1 and %d", MaxNodesPerIMEXDomain, v, cdv1beta1.MaxDaemonsPerClique)
		}
		e.MaxNodesPerIMEXDomain = n
	}
	if v := get(LogVerbosity); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return Env{}, fmt.Errorf("%s=%q: want a non-negative integer", LogVerbosity, v)
		}
		e.LogVerbosity = n
	}
	if v := get(IMEXConfigDir); v != "" {
		e.IMEXConfigDir = v
	}
	if v := get(HostsFile); v != "" {
		e.HostsFile = v
	}
	return e, nil
}
