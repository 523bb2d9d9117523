package claims

import (
	"slices"

	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"k8s.io/apimachinery/pkg/types"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/daemonenv"
	"cdplane/internal/kubeletplugin/cdi"
	"cdplane/internal/kubeletplugin/devices"
)

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
	spec := &cdispec.Spec{Kind: cdi.Kind}
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
		spec.Devices = append(spec.Devices, cdispec.Device{Name: cdi.DeviceName(claimUID, d.Device), ContainerEdits: edits})
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
		Kind:    cdi.Kind,
		Devices: []cdispec.Device{{Name: cdi.DeviceName(claimUID, device), ContainerEdits: edits}},
	}
}
