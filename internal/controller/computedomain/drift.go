package computedomain

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"reflect"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
)

// DesiredHashAnnotation holds, on every object the controller creates for a domain, a hash of
// the object as the controller that last wrote it rendered it. A controller of another version
// (a new daemon image, other daemon arguments or feature gates) renders another hash and so
// finds every object it has to bring up to date without comparing them field by field; hand
// edits, which leave the hash alone, are found by comparing the fields the controller owns.
const DesiredHashAnnotation = "resource.nvidia.com/desired-hash"

// desiredHash is the hash of an object as rendered, without its hash annotation.
func desiredHash(obj client.Object) string {
	c, ok := obj.DeepCopyObject().(client.Object)
	if !ok {
		panic(fmt.Sprintf("%T is not a client.Object", obj))
	}
	ann := c.GetAnnotations()
	delete(ann, DesiredHashAnnotation)
	c.SetAnnotations(ann)
	raw, err := json.Marshal(c)
	if err != nil {
		panic(fmt.Sprintf("marshalling %T: %v", obj, err)) // API types always marshal
	}
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:8])
}

// stampDesiredHash records the object's hash in its annotation.
func stampDesiredHash(obj client.Object) {
	h := desiredHash(obj)
	ann := obj.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[DesiredHashAnnotation] = h
	obj.SetAnnotations(ann)
}

// converge brings current, an object created for the domain by this plane, back to desired.
// Only objects created for the domain get here: a foreign one stays the clash it is reported as.
func (r *Reconciler) converge(ctx context.Context, cd *cdv1beta1.ComputeDomain, desired, current client.Object) error {
	switch d := desired.(type) {
	case *appsv1.DaemonSet:
		return r.convergeDaemonSet(ctx, cd, d, current.(*appsv1.DaemonSet))
	case *resourcev1.ResourceClaimTemplate:
		return r.convergeClaimTemplate(ctx, cd, d, current.(*resourcev1.ResourceClaimTemplate))
	}
	return nil
}

// convergeDaemonSet updates the domain's DaemonSet when it drifted from desired, with an Update
// of the object as read from the apiserver: its resourceVersion makes a concurrent change a
// conflict, and the reconcile is retried. The pod template follows desired, and so does the
// update strategy, which decides whether the running daemons are replaced now (RollingUpdate)
// or when their pods go (OnDelete).
func (r *Reconciler) convergeDaemonSet(ctx context.Context, cd *cdv1beta1.ComputeDomain, desired, current *appsv1.DaemonSet) error {
	if len(daemonSetDrift(desired, current)) == 0 {
		return nil
	}
	key := client.ObjectKeyFromObject(desired)
	fresh := &appsv1.DaemonSet{}
	if ok, err := r.ownedOnServer(ctx, fresh, key, string(cd.UID), false); !ok || err != nil {
		return err
	}
	drift := daemonSetDrift(desired, fresh)
	if len(drift) == 0 {
		return nil // the cache was behind
	}
	updated := updatedDaemonSet(desired, fresh)
	if err := r.client.Update(ctx, updated); err != nil {
		return fmt.Errorf("updating DaemonSet %s to the desired state: %w", key, err)
	}
	ctrl.LoggerFrom(ctx).Info("Updated the daemon DaemonSet to the desired state", "daemonSet", klog.KObj(updated),
		"fields", drift, "updateStrategy", updated.Spec.UpdateStrategy.Type)
	updated.DeepCopyInto(current)
	return nil
}

// convergeClaimTemplate brings a claim template of the domain back to desired. Its spec is
// immutable (resource.k8s.io/v1 refuses any change to it), so a template whose spec drifted is
// deleted and created again; when only its metadata (labels, owner references, the hash)
// drifted, that is updated in place.
//
// Deleting a template touches no claim made from it: the resource-claim controller copies the
// template's spec into each claim it creates, and the claim (owned by its pod) keeps no link to
// the template, so running workloads and daemons keep their claims and devices. A pod whose
// claim is created in the moment the template is gone waits: the resource-claim controller
// retries until the template is back.
func (r *Reconciler) convergeClaimTemplate(ctx context.Context, cd *cdv1beta1.ComputeDomain, desired, current *resourcev1.ResourceClaimTemplate) error {
	if meta, spec := claimTemplateDrift(desired, current); len(meta)+len(spec) == 0 {
		return nil
	}
	key := client.ObjectKeyFromObject(desired)
	fresh := &resourcev1.ResourceClaimTemplate{}
	if ok, err := r.ownedOnServer(ctx, fresh, key, string(cd.UID), false); !ok || err != nil {
		return err
	}
	meta, spec := claimTemplateDrift(desired, fresh)
	log := ctrl.LoggerFrom(ctx)
	switch {
	case len(spec) > 0:
		// Preconditions: a template changed or replaced since the read is not deleted.
		if err := r.client.Delete(ctx, fresh, client.Preconditions{UID: &fresh.UID, ResourceVersion: &fresh.ResourceVersion}); client.IgnoreNotFound(err) != nil {
			return fmt.Errorf("deleting ResourceClaimTemplate %s to recreate it: %w", key, err)
		}
		created := desired.DeepCopy()
		if err := r.client.Create(ctx, created); err != nil {
			if apierrors.IsAlreadyExists(err) {
				return fmt.Errorf("recreating ResourceClaimTemplate %s: the old one is still there: %w", key, err)
			}
			return fmt.Errorf("recreating ResourceClaimTemplate %s: %w", key, err)
		}
		log.Info("Recreated a claim template whose spec drifted from the desired state (the spec is immutable; claims made from it are unaffected)",
			"resourceClaimTemplate", klog.KObj(created), "fields", append(spec, meta...))
		created.DeepCopyInto(current)
	case len(meta) > 0:
		updated := updatedClaimTemplateMeta(desired, fresh)
		if err := r.client.Update(ctx, updated); err != nil {
			return fmt.Errorf("updating ResourceClaimTemplate %s to the desired state: %w", key, err)
		}
		log.Info("Updated a claim template's metadata to the desired state", "resourceClaimTemplate", klog.KObj(updated),
			"fields", meta)
		updated.DeepCopyInto(current)
	}
	return nil
}

// daemonSetDrift names the fields of current, a DaemonSet created for the domain, that differ
// from desired among those the controller owns: its hash annotation; the labels it sets on the
// DaemonSet and the pod template (other labels and annotations, such as the one
// `kubectl rollout restart` sets, are someone else's and stay); the update strategy; and the
// whole pod spec. The pod spec is compared whole, not only in the fields desired sets, because
// the daemons' shape is the controller's alone (a hand-added argument, volume or privilege
// must go, as the DaemonSet admission policy expects); the fields the apiserver fills in when
// desired leaves them empty are filled in desired first (withAPIDefaults), so that a stored
// object compares equal to what was written. The DaemonSet's own defaults (revisionHistoryLimit)
// are not owned, and its selector is immutable.
func daemonSetDrift(desired, current *appsv1.DaemonSet) []string {
	var out []string
	if current.Annotations[DesiredHashAnnotation] != desired.Annotations[DesiredHashAnnotation] {
		out = append(out, "metadata.annotations["+DesiredHashAnnotation+"]")
	}
	out = append(out, mapDrift("metadata.labels", desired.Labels, current.Labels)...)
	out = append(out, mapDrift("spec.template.metadata.labels", desired.Spec.Template.Labels, current.Spec.Template.Labels)...)
	out = append(out, mapDrift("spec.template.metadata.annotations", desired.Spec.Template.Annotations, current.Spec.Template.Annotations)...)
	if !equality.Semantic.DeepEqual(desired.Spec.UpdateStrategy, current.Spec.UpdateStrategy) {
		out = append(out, "spec.updateStrategy")
	}
	if desired.Spec.MinReadySeconds != current.Spec.MinReadySeconds {
		out = append(out, "spec.minReadySeconds")
	}
	return append(out, podSpecDrift("spec.template.spec", withAPIDefaults(desired.Spec.Template.Spec), current.Spec.Template.Spec)...)
}

// podSpecDrift names the fields of got that differ from want, one level deep, and for the
// containers one level into each container.
func podSpecDrift(path string, want, got corev1.PodSpec) []string {
	wc, gc := want.Containers, got.Containers
	want.Containers, got.Containers = nil, nil
	out := fieldDrift(path, want, got)
	if len(wc) != len(gc) {
		return append(out, path+".containers")
	}
	for i := range wc {
		out = append(out, fieldDrift(fmt.Sprintf("%s.containers[%d]", path, i), wc[i], gc[i])...)
	}
	return out
}

// fieldDrift names, by their JSON names under path, the fields of two structs of one type that
// are not semantically equal (an empty list or map equals an absent one).
func fieldDrift(path string, want, got any) []string {
	wv, gv := reflect.ValueOf(want), reflect.ValueOf(got)
	var out []string
	for i := range wv.NumField() {
		if equality.Semantic.DeepEqual(wv.Field(i).Interface(), gv.Field(i).Interface()) {
			continue
		}
		f := wv.Type().Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if name == "" {
			name = f.Name
		}
		out = append(out, path+"."+name)
	}
	return out
}

// mapDrift names the keys of want whose value in got differs (or is missing). Keys only in got
// are not the controller's.
func mapDrift(path string, want, got map[string]string) []string {
	var out []string
	for k, v := range want {
		if g, ok := got[k]; !ok || g != v {
			out = append(out, path+"["+k+"]")
		}
	}
	return out
}

// withAPIDefaults returns spec with the values the apiserver fills into a DaemonSet's pod
// template where a field is empty (k8s.io/kubernetes pkg/apis/core/v1 SetDefaults_PodSpec,
// SetDefaults_Container, SetDefaults_Probe, SetDefaults_ObjectFieldSelector and the generated
// defaulters), for the kinds of fields the daemon template uses. Kubernetes adds no new
// defaults to PodSpec (they would roll every DaemonSet and Deployment on an apiserver upgrade),
// so this list stays complete; a field it misses would show as drift after every write, which
// the integration tests against a real apiserver catch.
func withAPIDefaults(in corev1.PodSpec) corev1.PodSpec {
	s := *in.DeepCopy()
	if s.DNSPolicy == "" {
		s.DNSPolicy = corev1.DNSClusterFirst
	}
	if s.RestartPolicy == "" {
		s.RestartPolicy = corev1.RestartPolicyAlways
	}
	if s.SecurityContext == nil {
		s.SecurityContext = &corev1.PodSecurityContext{}
	}
	if s.TerminationGracePeriodSeconds == nil {
		s.TerminationGracePeriodSeconds = ptr.To(int64(corev1.DefaultTerminationGracePeriodSeconds))
	}
	if s.SchedulerName == "" {
		s.SchedulerName = corev1.DefaultSchedulerName
	}
	if s.ServiceAccountName == "" {
		s.ServiceAccountName = s.DeprecatedServiceAccount
	}
	s.DeprecatedServiceAccount = s.ServiceAccountName
	for i := range s.InitContainers {
		containerDefaults(&s.InitContainers[i])
	}
	for i := range s.Containers {
		containerDefaults(&s.Containers[i])
	}
	return s
}

func containerDefaults(c *corev1.Container) {
	if c.ImagePullPolicy == "" {
		c.ImagePullPolicy = corev1.PullIfNotPresent
		if imageTag(c.Image) == "latest" {
			c.ImagePullPolicy = corev1.PullAlways
		}
	}
	if c.TerminationMessagePath == "" {
		c.TerminationMessagePath = corev1.TerminationMessagePathDefault
	}
	if c.TerminationMessagePolicy == "" {
		c.TerminationMessagePolicy = corev1.TerminationMessageReadFile
	}
	for i := range c.Ports {
		if c.Ports[i].Protocol == "" {
			c.Ports[i].Protocol = corev1.ProtocolTCP
		}
	}
	for i := range c.Env {
		if f := c.Env[i].ValueFrom; f != nil && f.FieldRef != nil && f.FieldRef.APIVersion == "" {
			f.FieldRef.APIVersion = "v1"
		}
	}
	for _, p := range []*corev1.Probe{c.StartupProbe, c.ReadinessProbe, c.LivenessProbe} {
		if p == nil {
			continue
		}
		if p.TimeoutSeconds == 0 {
			p.TimeoutSeconds = 1
		}
		if p.PeriodSeconds == 0 {
			p.PeriodSeconds = 10
		}
		if p.SuccessThreshold == 0 {
			p.SuccessThreshold = 1
		}
		if p.FailureThreshold == 0 {
			p.FailureThreshold = 3
		}
	}
}

// imageTag is the tag of an image reference as the apiserver reads it to default the pull
// policy: "latest" when the reference has neither a tag nor a digest.
func imageTag(image string) string {
	name, _, hasDigest := strings.Cut(image, "@")
	if i := strings.LastIndex(name, ":"); i > strings.LastIndex(name, "/") {
		return name[i+1:]
	}
	if hasDigest {
		return ""
	}
	return "latest"
}

// updatedDaemonSet is fresh, as read from the apiserver, brought to desired: desired's labels and
// hash added, the pod template's labels and annotations merged, its spec and the update strategy
// replaced. The selector is immutable and the same.
func updatedDaemonSet(desired, fresh *appsv1.DaemonSet) *appsv1.DaemonSet {
	out := fresh.DeepCopy()
	out.Labels = merged(out.Labels, desired.Labels)
	out.Annotations = merged(out.Annotations, desired.Annotations)
	out.Spec.Template.Labels = merged(out.Spec.Template.Labels, desired.Spec.Template.Labels)
	out.Spec.Template.Annotations = merged(out.Spec.Template.Annotations, desired.Spec.Template.Annotations)
	out.Spec.Template.Spec = *desired.Spec.Template.Spec.DeepCopy()
	out.Spec.UpdateStrategy = *desired.Spec.UpdateStrategy.DeepCopy()
	out.Spec.MinReadySeconds = desired.Spec.MinReadySeconds
	return out
}

// claimTemplateDrift names the fields of current, a claim template created for the domain, that
// differ from desired: in its metadata (hash, the controller's labels, its owner references),
// which can be updated, and in its spec, which cannot. The spec is compared whole, with the
// apiserver's defaults filled into desired and the opaque parameters compared as JSON values.
func claimTemplateDrift(desired, current *resourcev1.ResourceClaimTemplate) (meta, spec []string) {
	if current.Annotations[DesiredHashAnnotation] != desired.Annotations[DesiredHashAnnotation] {
		meta = append(meta, "metadata.annotations["+DesiredHashAnnotation+"]")
	}
	meta = append(meta, mapDrift("metadata.labels", desired.Labels, current.Labels)...)
	for _, ref := range desired.OwnerReferences {
		if !hasOwnerReference(current.OwnerReferences, ref) {
			meta = append(meta, "metadata.ownerReferences")
			break
		}
	}
	want := claimSpecDefaults(desired.Spec)
	if !equality.Semantic.DeepEqual(want.ObjectMeta, current.Spec.ObjectMeta) {
		spec = append(spec, "spec.metadata")
	}
	wd, gd := want.Spec.Devices, current.Spec.Spec.Devices
	wc, gc := wd.Config, gd.Config
	wd.Config, gd.Config = nil, nil
	spec = append(spec, fieldDrift("spec.spec.devices", wd, gd)...)
	if !sameConfigs(wc, gc) {
		spec = append(spec, "spec.spec.devices.config")
	}
	return meta, spec
}

// claimSpecDefaults returns the template spec with what the apiserver fills into an exact
// request left empty (k8s.io/kubernetes pkg/apis/resource/v1 SetDefaults_ExactDeviceRequest):
// allocation mode ExactCount, and then a count of 1.
func claimSpecDefaults(in resourcev1.ResourceClaimTemplateSpec) resourcev1.ResourceClaimTemplateSpec {
	s := *in.DeepCopy()
	for i := range s.Spec.Devices.Requests {
		e := s.Spec.Devices.Requests[i].Exactly
		if e == nil {
			continue
		}
		if e.AllocationMode == "" {
			e.AllocationMode = resourcev1.DeviceAllocationModeExactCount
		}
		if e.AllocationMode == resourcev1.DeviceAllocationModeExactCount && e.Count == 0 {
			e.Count = 1
		}
	}
	return s
}

// sameConfigs compares device configurations, their opaque parameters as JSON values (the
// apiserver may store the same value with other spacing).
func sameConfigs(want, got []resourcev1.DeviceClaimConfiguration) bool {
	if len(want) != len(got) {
		return false
	}
	for i := range want {
		w, g := want[i].DeepCopy(), got[i].DeepCopy()
		if w.Opaque != nil && g.Opaque != nil {
			if !sameJSON(w.Opaque.Parameters.Raw, g.Opaque.Parameters.Raw) {
				return false
			}
			w.Opaque.Parameters, g.Opaque.Parameters = runtime.RawExtension{}, runtime.RawExtension{}
		}
		if !equality.Semantic.DeepEqual(w, g) {
			return false
		}
	}
	return true
}

func sameJSON(a, b []byte) bool {
	if bytes.Equal(a, b) {
		return true
	}
	var av, bv any
	if json.Unmarshal(a, &av) != nil || json.Unmarshal(b, &bv) != nil {
		return false
	}
	return reflect.DeepEqual(av, bv)
}

func hasOwnerReference(refs []metav1.OwnerReference, want metav1.OwnerReference) bool {
	for _, r := range refs {
		if equality.Semantic.DeepEqual(r, want) {
			return true
		}
	}
	return false
}

// updatedClaimTemplateMeta is fresh with desired's labels, hash and owner references added.
func updatedClaimTemplateMeta(desired, fresh *resourcev1.ResourceClaimTemplate) *resourcev1.ResourceClaimTemplate {
	out := fresh.DeepCopy()
	out.Labels = merged(out.Labels, desired.Labels)
	out.Annotations = merged(out.Annotations, desired.Annotations)
	for _, ref := range desired.OwnerReferences {
		if hasOwnerReference(out.OwnerReferences, ref) {
			continue
		}
		// One reference per owner: a changed reference to the same owner is replaced.
		out.OwnerReferences = slices.DeleteFunc(out.OwnerReferences, func(r metav1.OwnerReference) bool { return r.UID == ref.UID })
		out.OwnerReferences = append(out.OwnerReferences, ref)
	}
	return out
}

// merged is base with add's entries set (nil when both are empty).
func merged(base, add map[string]string) map[string]string {
	if len(base)+len(add) == 0 {
		return nil
	}
	out := maps.Clone(base)
	if out == nil {
		out = map[string]string{}
	}
	maps.Copy(out, add)
	return out
}
