package claims

import (
	"errors"
	"fmt"
	"slices"

	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/dynamic-resource-allocation/resourceclaim"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin/devices"
	"cdplane/internal/kubeletplugin/failure"
)

// allocatedDevice is one of this driver's devices allocated to a claim.
type allocatedDevice struct {
	Request string
	Pool    string
	Device  string
	Kind    devices.DeviceKind
	// ID is the channel number (0 for the daemon device).
	ID int
}

// claimPlan is what preparing one claim means, read from its allocation alone.
type claimPlan struct {
	Kind devices.DeviceKind
	// DomainID is the UID of the ComputeDomain named by the claim's opaque config.
	DomainID string
	// AllocationMode is Single or All (channel claims only).
	AllocationMode string
	Devices        []allocatedDevice
}

// planClaim reads a claim's allocation: this driver's devices, and for each the opaque config
// for this driver that applies to its request (the last one listed wins, so a claim's config
// overrides its class's). Every opaque config of this driver is decoded strictly, whether or not
// it applies. A claim holds either channels or the daemon device, all of one domain; anything
// else is a *failure.PermanentError naming what is wrong; those the claim's author can fix (a config
// missing, invalid or conflicting) are tagged as a failure.UserError.
func planClaim(claim *resourcev1.ResourceClaim) (claimPlan, error) {
	if claim.Status.Allocation == nil {
		return claimPlan{}, failure.Retryablef("claim is not allocated")
	}
	alloc := claim.Status.Allocation.Devices
	decoded := make([]runtime.Object, len(alloc.Config))
	for i, c := range alloc.Config {
		if c.Opaque == nil || c.Opaque.Driver != cdv1beta1.DriverName {
			continue
		}
		obj, err := DecodeConfig(c.Opaque.Parameters.Raw)
		if err != nil {
			return claimPlan{}, failure.UserFixable(&failure.PermanentError{Err: fmt.Errorf("status.allocation.devices.config[%d].opaque.parameters: %w", i, unwrapPermanent(err))},
				failure.ReasonInvalidComputeDomainConfig, "")
		}
		decoded[i] = obj
	}

	var plan claimPlan
	for _, r := range alloc.Results {
		if r.Driver != cdv1beta1.DriverName {
			continue
		}
		kind, id, err := devices.ParseDeviceName(r.Device)
		if err != nil {
			return claimPlan{}, &failure.PermanentError{Err: err}
		}
		if plan.Kind != "" && plan.Kind != kind {
			return claimPlan{}, failure.UserFixable(failure.Permanentf("claim holds both channel and daemon devices; a claim must hold one kind"),
				failure.ReasonConflictingComputeDomainConfig, "")
		}
		plan.Kind = kind
		cfg := applyingConfig(alloc.Config, decoded, r.Request)
		domainID, mode, err := configFor(kind, cfg, r.Request)
		if err != nil {
			return claimPlan{}, err
		}
		if plan.DomainID != "" && plan.DomainID != domainID {
			return claimPlan{}, failure.UserFixable(failure.Permanentf("requests of one claim name different ComputeDomains (%s and %s)", plan.DomainID, domainID),
				failure.ReasonConflictingComputeDomainConfig, "")
		}
		if plan.AllocationMode != "" && plan.AllocationMode != mode {
			return claimPlan{}, failure.UserFixable(failure.Permanentf("requests of one claim ask for different allocation modes (%s and %s)", plan.AllocationMode, mode),
				failure.ReasonConflictingComputeDomainConfig, domainID)
		}
		plan.DomainID, plan.AllocationMode = domainID, mode
		plan.Devices = append(plan.Devices, allocatedDevice{Request: r.Request, Pool: r.Pool, Device: r.Device, Kind: kind, ID: id})
	}
	if len(plan.Devices) == 0 {
		return claimPlan{}, failure.Permanentf("no device of driver %s is allocated to the claim", cdv1beta1.DriverName)
	}
	if plan.Kind == devices.KindDaemon && len(plan.Devices) > 1 {
		return claimPlan{}, failure.Permanentf("claim holds %d daemon devices; a node has one", len(plan.Devices))
	}
	return plan, nil
}

// applyingConfig returns the last decoded config of this driver that applies to request (a
// config without requests applies to all), or nil.
func applyingConfig(configs []resourcev1.DeviceAllocationConfiguration, decoded []runtime.Object, request string) runtime.Object {
	var found runtime.Object
	base := resourceclaim.BaseRequestRef(request)
	for i, c := range configs {
		if decoded[i] == nil {
			continue
		}
		if len(c.Requests) == 0 || slices.Contains(c.Requests, request) || slices.Contains(c.Requests, base) {
			found = decoded[i]
		}
	}
	return found
}

// configFor checks that the config suits a device of the given kind and returns its domain and
// allocation mode.
func configFor(kind devices.DeviceKind, cfg runtime.Object, request string) (string, string, error) {
	switch c := cfg.(type) {
	case *cdv1beta1.ComputeDomainChannelConfig:
		if kind == devices.KindChannel {
			return c.DomainID, c.AllocationMode, nil
		}
	case *cdv1beta1.ComputeDomainDaemonConfig:
		if kind == devices.KindDaemon {
			return c.DomainID, "", nil
		}
	case nil:
		return "", "", failure.UserFixable(failure.Permanentf("request %q: no opaque config of driver %s applies; a %s device needs a %s",
			request, cdv1beta1.DriverName, kind, wantKind(kind)), failure.ReasonComputeDomainConfigMissing, "")
	}
	return "", "", failure.UserFixable(failure.Permanentf("request %q: a %s device needs a %s, got a %s",
		request, kind, wantKind(kind), cfg.GetObjectKind().GroupVersionKind().Kind), failure.ReasonInvalidComputeDomainConfig, "")
}

func wantKind(kind devices.DeviceKind) string {
	if kind == devices.KindDaemon {
		return cdv1beta1.ComputeDomainDaemonConfigKind
	}
	return cdv1beta1.ComputeDomainChannelConfigKind
}

// unwrapPermanent is the error the failure.PermanentError err is (or wraps) holds, without the
// prefix, for nesting in another failure.PermanentError; err itself when it is not permanent.
func unwrapPermanent(err error) error {
	var p *failure.PermanentError
	if errors.As(err, &p) {
		return p.Err
	}
	return err
}
