// Package secretmirror copies Secrets that match a selector in a control plane's source
// namespace into the namespaces the plane owns: namespaces labelled with the plane's id, or, for
// the legacy plane, only namespaces matching an explicit selector (none by default).
//
// A copy carries the plane's mirror marker (MirroredFromLabel set to the source namespace, plus
// the plane label for a plane with an id, and no plane label for the legacy plane). A Secret
// without this plane's marker is never written or deleted: it is reported instead. Every write
// reads the target afresh from the apiserver, re-checks the marker and the namespace's
// ownership, and carries the target's resourceVersion; conflicts are retried from a fresh read.
//
// The mirror needs Secret rights only in the source namespace and in its target namespaces
// (namespaced RBAC), never cluster-wide: its cache holds the selected Secrets of the source
// namespace and the metadata of its target namespaces, nothing else. Copies are not cached or
// watched; they are read with namespaced requests to the apiserver. The workqueue carries two
// request shapes:
//   - {Namespace: source namespace, Name: source name}: mirror one source. The copy in each
//     current target is read by name and written or deleted. A source that exists is reconciled
//     again after ResyncInterval, which heals copies deleted or edited by someone else.
//   - {Namespace: ns, Name: ""} (a Secret name is never empty): namespace ns left the plane
//     (gone from the label-scoped namespace cache, or its labels changed). If a fresh read says
//     it is still not a target, the plane's copies there are listed (namespaced, by marker) and
//     deleted, each after a fresh read and ownership check. Forbidden is logged at V(1) and not
//     retried: `cdplane unassign` removes the copies itself before it removes the RoleBindings.
//
// On start-up, once the caches have synced, every source is enqueued, and so is the name of
// every copy a namespaced list finds in a current target, so copies whose source was deleted
// while the controller was down are removed. Copies left in a namespace that left the plane
// while the controller was down are out of its reach (it may have no rights there any more).
// No finalizer is needed on the source.
package secretmirror

import (
	"errors"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/plane"
)

// Labels, annotations and names of the mirror.
const (
	// MirroredFromLabel marks a copy; its value is the source namespace. With the plane label
	// (or, for the legacy plane, without one) it is the plane's mirror marker.
	MirroredFromLabel = "resource.nvidia.com/mirrored-from"
	// SourceAnnotation names a copy's source Secret as "<namespace>/<name>".
	SourceAnnotation = "resource.nvidia.com/mirror-source"
	// SourceUIDAnnotation carries the UID of a copy's source Secret.
	SourceUIDAnnotation = "resource.nvidia.com/mirror-source-uid"

	// ControllerName names the controller, its event recorder and its log lines.
	ControllerName = "secretmirror"
	// DefaultFieldManager is the field manager of the mirror's writes.
	DefaultFieldManager = "cdplane-secretmirror"
	// DefaultForeignRecheckInterval is how often a source with a foreign same-named target is
	// looked at again, so that the copy is made once the foreign Secret is gone.
	DefaultForeignRecheckInterval = 5 * time.Minute
	// DefaultResyncInterval is how often every source is reconciled again: copies are not
	// watched, so this is what heals a copy deleted or changed by someone else.
	DefaultResyncInterval = 10 * time.Minute

	// ReasonForeignTarget is the reason of the Warning event on a source whose copy would
	// overwrite a Secret the plane does not own.
	ReasonForeignTarget = "ForeignTarget"
)

// Options configure the Secret mirror of one control plane.
type Options struct {
	// ControlPlaneID is the plane's id; empty for the legacy plane.
	ControlPlaneID string
	// SourceNamespace holds the Secrets to mirror (the plane's driver namespace, typically). It
	// is never a target.
	SourceNamespace string
	// SecretSelector picks the Secrets of SourceNamespace to mirror. Required and not empty: an
	// empty selector would copy every Secret of the namespace, service-account tokens included.
	SecretSelector labels.Selector
	// LegacyNamespaceSelector picks the target namespaces of the legacy plane among the
	// namespaces no plane owns. Nil: the legacy plane mirrors into no namespace. Only for the
	// legacy plane; a plane with an id mirrors into the namespaces labelled with its id.
	LegacyNamespaceSelector labels.Selector
	// FieldManager names the writer of the copies; default DefaultFieldManager.
	FieldManager string
	// ForeignRecheckInterval is how long after reporting a foreign target the source is looked
	// at again; default DefaultForeignRecheckInterval.
	ForeignRecheckInterval time.Duration
	// ResyncInterval is how long after a source is reconciled it is reconciled again; default
	// DefaultResyncInterval. Must be positive.
	ResyncInterval time.Duration
}

// Defaults fills unset options.
func (o *Options) Defaults() {
	if o.FieldManager == "" {
		o.FieldManager = DefaultFieldManager
	}
	if o.ForeignRecheckInterval == 0 {
		o.ForeignRecheckInterval = DefaultForeignRecheckInterval
	}
	if o.ResyncInterval == 0 {
		o.ResyncInterval = DefaultResyncInterval
	}
}

// Validate returns an error naming the first invalid option.
func (o *Options) Validate() error {
	if err := plane.ValidateID(o.ControlPlaneID); err != nil {
		return err
	}
	if o.SourceNamespace == "" {
		return errors.New("secret mirror: the source namespace is required")
	}
	if errs := validation.IsDNS1123Label(o.SourceNamespace); len(errs) > 0 {
		return fmt.Errorf("secret mirror: invalid source namespace %q: %v", o.SourceNamespace, errs)
	}
	if !usable(o.SecretSelector) || o.SecretSelector.Empty() {
		return errors.New("secret mirror: a non-empty Secret selector is required (an empty one would mirror every Secret of the source namespace)")
	}
	if o.ControlPlaneID != "" && o.LegacyNamespaceSelector != nil {
		return fmt.Errorf("secret mirror: a namespace selector applies to the legacy plane only; plane %q mirrors into the namespaces labelled %s=%s",
			o.ControlPlaneID, cdv1beta1.ControlPlaneLabel, o.ControlPlaneID)
	}
	if o.ForeignRecheckInterval < 0 {
		return fmt.Errorf("secret mirror: the foreign recheck interval must not be negative, got %s", o.ForeignRecheckInterval)
	}
	if o.ResyncInterval <= 0 {
		return fmt.Errorf("secret mirror: the resync interval must be positive, got %s", o.ResyncInterval)
	}
	return nil
}

// usable reports whether a selector can be sent to the apiserver: labels.Nothing() cannot (it
// serialises as the empty string, which selects everything).
func usable(s labels.Selector) bool {
	if s == nil {
		return false
	}
	_, selectable := s.Requirements()
	return selectable
}
