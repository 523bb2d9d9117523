package claims

import (
	"errors"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	sigsjson "sigs.k8s.io/json"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/kubeletplugin/failure"
)

// DecodeConfig decodes the opaque parameters of a device config for this driver, strictly:
// apiVersion must be resource.nvidia.com/v1beta1, kind ComputeDomainChannelConfig or
// ComputeDomainDaemonConfig, field names match exactly (case-sensitive), and an unknown or
// duplicate field is an error that names it. The values are validated too: domainID must be
// set, allocationMode must be empty, Single or All. Every error is a *failure.PermanentError.
//
// It returns a *cdv1beta1.ComputeDomainChannelConfig or a *cdv1beta1.ComputeDomainDaemonConfig;
// an empty allocationMode comes back as Single.
func DecodeConfig(raw []byte) (runtime.Object, error) {
	if len(raw) == 0 {
		return nil, failure.Permanentf("opaque config is empty: want a %s or %s", cdv1beta1.ComputeDomainChannelConfigKind, cdv1beta1.ComputeDomainDaemonConfigKind)
	}
	var tm metav1.TypeMeta
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &tm); err != nil {
		return nil, failure.Permanentf("opaque config is not a JSON object: %v", err)
	}
	if tm.APIVersion != cdv1beta1.GroupVersion.String() {
		return nil, failure.Permanentf("opaque config: field apiVersion is %q, want %q", tm.APIVersion, cdv1beta1.GroupVersion.String())
	}
	var obj runtime.Object
	switch tm.Kind {
	case cdv1beta1.ComputeDomainChannelConfigKind:
		obj = &cdv1beta1.ComputeDomainChannelConfig{}
	case cdv1beta1.ComputeDomainDaemonConfigKind:
		obj = &cdv1beta1.ComputeDomainDaemonConfig{}
	default:
		return nil, failure.Permanentf("opaque config: field kind is %q, want %s or %s", tm.Kind,
			cdv1beta1.ComputeDomainChannelConfigKind, cdv1beta1.ComputeDomainDaemonConfigKind)
	}
	strict, err := sigsjson.UnmarshalStrict(raw, obj)
	if err != nil {
		return nil, failure.Permanentf("opaque config %s: %v", tm.Kind, err)
	}
	if len(strict) > 0 {
		msgs := make([]string, len(strict))
		for i, e := range strict {
			msgs[i] = e.Error()
		}
		return nil, failure.Permanentf("opaque config %s: %s", tm.Kind, strings.Join(msgs, ", "))
	}
	if err := validateConfig(obj); err != nil {
		return nil, &failure.PermanentError{Err: fmt.Errorf("opaque config %s: %w", tm.Kind, err)}
	}
	return obj, nil
}

// validateConfig checks the values of a decoded config and fills the default allocation mode.
func validateConfig(obj runtime.Object) error {
	var domainID string
	switch c := obj.(type) {
	case *cdv1beta1.ComputeDomainChannelConfig:
		domainID = c.DomainID
		switch c.AllocationMode {
		case "":
			c.AllocationMode = cdv1beta1.AllocationModeSingle
		case cdv1beta1.AllocationModeSingle, cdv1beta1.AllocationModeAll:
		default:
			return fmt.Errorf("field allocationMode is %q, want %s or %s", c.AllocationMode,
				cdv1beta1.AllocationModeSingle, cdv1beta1.AllocationModeAll)
		}
	case *cdv1beta1.ComputeDomainDaemonConfig:
		domainID = c.DomainID
	}
	if domainID == "" {
		return errors.New("field domainID is required")
	}
	// A UID is a label value in practice; anything else cannot name a domain (nor a node label).
	if errs := validation.IsValidLabelValue(domainID); len(errs) > 0 {
		return fmt.Errorf("field domainID %q is not a ComputeDomain UID: %s", domainID, strings.Join(errs, "; "))
	}
	return nil
}
