package secretmirror

import (
	"bytes"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"
	"k8s.io/apimachinery/pkg/util/sets"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/plane"
)

// Marker returns the labels that make a Secret a copy owned by the plane: MirroredFromLabel set
// to the source namespace and, for a plane with an id, the plane label.
func Marker(id, sourceNS string) map[string]string {
	m := map[string]string{MirroredFromLabel: sourceNS}
	if id != "" {
		m[cdv1beta1.ControlPlaneLabel] = id
	}
	return m
}

// OwnsCopy reports whether a Secret with these labels is a copy owned by the plane: it carries
// the plane's marker. For the legacy plane that means no plane label at all, so a copy another
// plane made from a namespace of the same name is never the legacy plane's.
func OwnsCopy(id, sourceNS string, l map[string]string) bool {
	return l[MirroredFromLabel] == sourceNS && plane.Owns(id, l)
}

// OwnsNamespace reports whether a namespace is a target of the plane: labelled with the plane's
// id, or, for the legacy plane, unlabelled and matching the explicit selector. The source
// namespace, terminating namespaces and the kube-* namespaces (kube-system holds the cluster's
// own credentials; the controller's admission policy refuses its Secret writes there too) are
// never targets.
func OwnsNamespace(o Options, ns metav1.Object) bool {
	if ns.GetName() == o.SourceNamespace || ns.GetDeletionTimestamp() != nil || strings.HasPrefix(ns.GetName(), "kube-") {
		return false
	}
	if !plane.Owns(o.ControlPlaneID, ns.GetLabels()) {
		return false
	}
	if o.ControlPlaneID != "" {
		return true
	}
	return usable(o.LegacyNamespaceSelector) && o.LegacyNamespaceSelector.Matches(labels.Set(ns.GetLabels()))
}

// Targets returns the names of the namespaces among nss that are targets of the plane.
func Targets(o Options, nss []metav1.PartialObjectMetadata) sets.Set[string] {
	out := sets.New[string]()
	for i := range nss {
		if OwnsNamespace(o, &nss[i]) {
			out.Insert(nss[i].Name)
		}
	}
	return out
}

// Wanted reports whether a Secret of the source namespace is to be mirrored: it exists, is not
// being deleted, matches the selector, and is not a service-account token (which is bound to
// its own namespace and which the apiserver would refuse to copy) or a bootstrap token (a node
// credential; the controller's admission policy refuses to write either type).
func Wanted(o Options, src *corev1.Secret) bool {
	return src != nil && src.DeletionTimestamp == nil && src.Namespace == o.SourceNamespace &&
		usable(o.SecretSelector) && o.SecretSelector.Matches(labels.Set(src.Labels)) &&
		src.Type != corev1.SecretTypeServiceAccountToken && src.Type != corev1.SecretTypeBootstrapToken
}

// DesiredCopy returns the copy of src that belongs in namespace ns: the source's type and data,
// the plane's marker, and annotations naming the source.
func DesiredCopy(o Options, src *corev1.Secret, ns string) *corev1.Secret {
	return &corev1.Secret{
		TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
		ObjectMeta: metav1.ObjectMeta{
			Name:      src.Name,
			Namespace: ns,
			Labels:    Marker(o.ControlPlaneID, o.SourceNamespace),
			Annotations: map[string]string{
				SourceAnnotation:    src.Namespace + "/" + src.Name,
				SourceUIDAnnotation: string(src.UID),
			},
		},
		Type: secretType(src.Type),
		Data: cloneData(src.Data),
	}
}

// UpToDate reports whether cur already carries everything desired sets: type, data, marker and
// source annotations. Labels and annotations others added to cur do not matter.
func UpToDate(cur, desired *corev1.Secret) bool {
	return secretType(cur.Type) == secretType(desired.Type) && dataEqual(cur.Data, desired.Data) &&
		includes(cur.Labels, desired.Labels) && includes(cur.Annotations, desired.Annotations)
}

// NeedsReplace reports whether cur cannot be updated into desired and must be deleted and
// created again: a Secret's type is immutable, and so is the data of an immutable Secret.
func NeedsReplace(cur, desired *corev1.Secret) bool {
	if secretType(cur.Type) != secretType(desired.Type) {
		return true
	}
	return cur.Immutable != nil && *cur.Immutable && !dataEqual(cur.Data, desired.Data)
}

// ApplyTo returns cur updated to desired: desired's data, type, labels and annotations, and
// cur's other labels and annotations and its resourceVersion, so the update is optimistic.
func ApplyTo(cur, desired *corev1.Secret) *corev1.Secret {
	out := cur.DeepCopy()
	if out.Labels == nil {
		out.Labels = map[string]string{}
	}
	maps.Copy(out.Labels, desired.Labels)
	if out.Annotations == nil {
		out.Annotations = map[string]string{}
	}
	maps.Copy(out.Annotations, desired.Annotations)
	out.Type = desired.Type
	out.Data = cloneData(desired.Data)
	out.StringData = nil
	return out
}

// Plan says which namespaces need a write of one source's copy and which hold a copy to delete.
type Plan struct {
	// Write lists the targets whose copy is missing or out of date, sorted.
	Write []string
	// Delete lists the namespaces holding a copy that is no longer wanted, sorted.
	Delete []string
}

// MakePlan compares the wanted copies of src (nil when the source is gone or no longer wanted)
// in targets with the plane's copies of the same name, as read from the apiserver (the
// reconciler reads them in the targets only).
func MakePlan(o Options, src *corev1.Secret, targets sets.Set[string], copies []*corev1.Secret) Plan {
	var p Plan
	byNS := map[string]*corev1.Secret{}
	for _, c := range copies {
		byNS[c.Namespace] = c
	}
	if Wanted(o, src) {
		for _, ns := range sets.List(targets) {
			if cur, ok := byNS[ns]; !ok || !UpToDate(cur, DesiredCopy(o, src, ns)) {
				p.Write = append(p.Write, ns)
			}
		}
	} else {
		targets = nil
	}
	for ns := range byNS {
		if !targets.Has(ns) {
			p.Delete = append(p.Delete, ns)
		}
	}
	slices.Sort(p.Delete)
	return p
}

// NextCheck returns how long after a pass without error a source is reconciled again: a source
// that is mirrored after ResyncInterval (copies are not watched, so this heals a copy deleted or
// changed by someone else), sooner, after ForeignRecheckInterval, when a foreign Secret blocks
// one of its copies; a source that is gone or no longer selected never (0): its copies were
// deleted and nothing is left to heal.
func NextCheck(o Options, wanted, foreign bool) time.Duration {
	if !wanted {
		return 0
	}
	if foreign && o.ForeignRecheckInterval > 0 && o.ForeignRecheckInterval < o.ResyncInterval {
		return o.ForeignRecheckInterval
	}
	return o.ResyncInterval
}

// NamespaceChange is what an event of the label-scoped namespace cache asks the mirror to do.
type NamespaceChange int

const (
	// NamespaceUnchanged means nothing that decides whether the namespace is a target changed.
	NamespaceUnchanged NamespaceChange = iota
	// NamespaceJoined means the namespace is a target (new, or its labels changed): every
	// source is mirrored again.
	NamespaceJoined
	// NamespaceLeft means the namespace may have left the plane: the plane's copies there are
	// swept.
	NamespaceLeft
)

func (c NamespaceChange) String() string {
	return [...]string{"unchanged", "joined", "left"}[c]
}

// ClassifyNamespaceEvent says what a namespace event asks for. old is nil for a creation
// (including the cache's initial list), cur nil for a deletion, which the label-scoped cache
// also reports when the namespace's labels stop matching its selector. Updates count only when
// the labels or the deletion timestamp changed.
func ClassifyNamespaceEvent(o Options, old, cur metav1.Object) NamespaceChange {
	switch {
	case cur == nil:
		return NamespaceLeft
	case OwnsNamespace(o, cur):
		if old != nil && !membershipChanged(old, cur) {
			return NamespaceUnchanged
		}
		return NamespaceJoined
	case old == nil:
		// Listed but not a target (the source namespace, or terminating): nothing was mirrored
		// there by this process, and a terminating namespace takes its Secrets with it.
		return NamespaceUnchanged
	case membershipChanged(old, cur):
		return NamespaceLeft
	default:
		return NamespaceUnchanged
	}
}

func membershipChanged(old, cur metav1.Object) bool {
	return !maps.Equal(old.GetLabels(), cur.GetLabels()) ||
		!old.GetDeletionTimestamp().Equal(cur.GetDeletionTimestamp())
}

// SourceSelector selects the Secrets of the source namespace to cache.
func SourceSelector(o Options) labels.Selector {
	if !usable(o.SecretSelector) {
		return matchNothing()
	}
	return o.SecretSelector
}

// CopySelector selects the plane's copies: its marker, and for the legacy plane no plane label.
// It is sent with namespaced lists only: copies are never listed across namespaces.
func CopySelector(o Options) labels.Selector {
	planeReqs, _ := plane.Selector(o.ControlPlaneID).Requirements()
	return labels.SelectorFromSet(labels.Set{MirroredFromLabel: o.SourceNamespace}).Add(planeReqs...)
}

// NamespaceSelector selects the plane's target namespaces: labelled with its id; for the legacy
// plane, matching LegacyNamespaceSelector and carrying no plane label, and none without a
// selector.
func NamespaceSelector(o Options) labels.Selector {
	if o.ControlPlaneID != "" {
		return plane.Selector(o.ControlPlaneID)
	}
	if !usable(o.LegacyNamespaceSelector) {
		return matchNothing()
	}
	reqs, _ := o.LegacyNamespaceSelector.Requirements()
	unassigned, _ := plane.Selector("").Requirements()
	return labels.NewSelector().Add(reqs...).Add(unassigned...)
}

// matchNothing is a selector the apiserver accepts and that no object matches: the plane label
// both present and absent.
func matchNothing() labels.Selector {
	exists, err := labels.NewRequirement(cdv1beta1.ControlPlaneLabel, selection.Exists, nil)
	if err != nil {
		panic(err) // the key is a constant
	}
	absent, _ := plane.Selector("").Requirements()
	return labels.NewSelector().Add(*exists).Add(absent...)
}

func secretType(t corev1.SecretType) corev1.SecretType {
	if t == "" {
		return corev1.SecretTypeOpaque
	}
	return t
}

func cloneData(d map[string][]byte) map[string][]byte {
	if d == nil {
		return nil
	}
	out := make(map[string][]byte, len(d))
	for k, v := range d {
		out[k] = bytes.Clone(v)
	}
	return out
}

func dataEqual(a, b map[string][]byte) bool {
	return maps.EqualFunc(a, b, bytes.Equal)
}

func includes(have, want map[string]string) bool {
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}
