package kubeletplugin

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"k8s.io/apimachinery/pkg/types"
	cdiapi "tags.cncf.io/container-device-interface/pkg/cdi"
	"tags.cncf.io/container-device-interface/pkg/parser"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/daemonenv"
	"cdplane/internal/kubeletplugin/devices"
	"cdplane/internal/kubeletplugin/failure"
)

// CDI names of this driver's transient, per-claim specs.
const (
	CDIVendor = "k8s." + cdv1beta1.DriverName
	CDIClass  = "claim"
	CDIKind   = CDIVendor + "/" + CDIClass
)

// CDISpecName is the file name (without directory) of a claim's CDI spec.
func CDISpecName(claimUID types.UID) string {
	return cdiapi.GenerateTransientSpecName(CDIVendor, CDIClass, string(claimUID)) + ".json"
}

// cdiDeviceName is the CDI device name of one prepared device of a claim: unique per claim, so
// that a runtime's cache never mistakes one claim's device for another's.
func cdiDeviceName(claimUID types.UID, device string) string {
	return string(claimUID) + "-" + device
}

// CDIDeviceID is the fully qualified CDI device id the kubelet passes to the runtime.
func CDIDeviceID(claimUID types.UID, device string) string {
	return parser.QualifiedName(CDIVendor, CDIClass, cdiDeviceName(claimUID, device))
}

// channelIDs returns the channels a channel claim injects: every channel for All, else the
// allocated ones.
func channelIDs(plan claimPlan) []int {
	if plan.AllocationMode == cdv1beta1.AllocationModeAll {
		ids := make([]int, devices.MaxChannels)
		for i := range ids {
			ids[i] = i
		}
		return ids
	}
	ids := make([]int, 0, len(plan.Devices))
	for _, d := range plan.Devices {
		ids = append(ids, d.ID)
	}
	return ids
}

// channelCDIDevices says which allocated devices of a channel claim get a CDI device: each one
// for Single, only the first for All (it carries every channel).
func channelCDIDevices(plan claimPlan) map[string]bool {
	out := map[string]bool{}
	for i, d := range plan.Devices {
		if plan.AllocationMode != cdv1beta1.AllocationModeAll || i == 0 {
			out[d.Device] = true
		}
	}
	return out
}

// channelSpec is the CDI spec of a channel claim; nodes are the device nodes of channelIDs(plan),
// in order. For Single each allocated channel device carries its own device node, for All the
// first carries them all.
func channelSpec(claimUID types.UID, plan claimPlan, nodes []*cdispec.DeviceNode) *cdispec.Spec {
	spec := &cdispec.Spec{Kind: CDIKind}
	for i, d := range plan.Devices {
		var edits cdispec.ContainerEdits
		switch {
		case plan.AllocationMode == cdv1beta1.AllocationModeAll && i == 0:
			edits.DeviceNodes = nodes
		case plan.AllocationMode != cdv1beta1.AllocationModeAll:
			edits.DeviceNodes = []*cdispec.DeviceNode{nodes[i]}
		default:
			continue
		}
		spec.Devices = append(spec.Devices, cdispec.Device{Name: cdiDeviceName(claimUID, d.Device), ContainerEdits: edits})
	}
	return spec
}

// daemonSpec is the CDI spec of a daemon claim: the domain's identity and clique in the
// environment (the daemonenv contract), the domain's config directory, the host driver's files
// (driverMounts, named in env), and the IMEX management device when the node has a clique.
func daemonSpec(claimUID types.UID, device string, env daemonenv.Claim, configDir string, driverMounts []*cdispec.Mount, driverDevices []*cdispec.DeviceNode, mgmtDev *cdispec.DeviceNode) *cdispec.Spec {
	edits := cdispec.ContainerEdits{
		Env: env.Environ(),
		Mounts: append([]*cdispec.Mount{{
			HostPath: configDir, ContainerPath: env.IMEXConfigDir,
			Options: []string{"rw", "nosuid", "nodev", "bind"},
		}}, driverMounts...),
		DeviceNodes: slices.Clone(driverDevices),
	}
	if env.CliqueID != "" && mgmtDev != nil {
		edits.DeviceNodes = append(edits.DeviceNodes, mgmtDev)
	}
	return &cdispec.Spec{
		Kind:    CDIKind,
		Devices: []cdispec.Device{{Name: cdiDeviceName(claimUID, device), ContainerEdits: edits}},
	}
}

// cdiWriter writes and removes claim specs in one CDI directory.
type cdiWriter struct {
	cache *cdiapi.Cache
	dir   string
}

func newCDIWriter(dir string) (*cdiWriter, error) {
	cache, err := cdiapi.NewCache(cdiapi.WithSpecDirs(dir), cdiapi.WithAutoRefresh(false))
	if err != nil {
		return nil, fmt.Errorf("CDI directory %s: %w", dir, err)
	}
	return &cdiWriter{cache: cache, dir: dir}, nil
}

// exists reports whether the spec file name is in the CDI directory. The directory is a tmpfs
// on GPU nodes (/var/run/cdi): a reboot empties it while the checkpoint stays.
func (w *cdiWriter) exists(name string) bool {
	_, err := os.Stat(filepath.Join(w.dir, filepath.Base(name)))
	return err == nil
}

// write validates spec, sets the lowest CDI version that can express it, and writes it
// atomically under name.
func (w *cdiWriter) write(spec *cdispec.Spec, name string) error {
	version, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return failure.Tag(failure.CDI, fmt.Errorf("CDI spec %s: %w", name, err))
	}
	spec.Version = version
	if err := w.cache.WriteSpec(spec, name); err != nil {
		return failure.Tag(failure.CDI, fmt.Errorf("writing CDI spec %s: %w", name, err))
	}
	return nil
}

// remove deletes a spec; a missing one is not an error.
func (w *cdiWriter) remove(name string) error {
	if name == "" {
		return nil
	}
	if err := w.cache.RemoveSpec(filepath.Base(name)); err != nil {
		return failure.Tag(failure.CDI, fmt.Errorf("removing CDI spec %s: %w", name, err))
	}
	return nil
}
