package lifecycle

import (
	"context"
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/plane"
)

// Quota bounds what one assigned namespace may hold of what every tenant of a plane shares: a
// node serves one ComputeDomain at a time and has one channel 0, so a tenant claiming channels
// on every node (pause pods of its own domain's template) would stall every other domain of the
// plane, and each domain costs a DaemonSet and a claim template in the driver namespace, outside
// the tenant's own quota. Zero leaves that resource unbounded.
type Quota struct {
	// Domains bounds the namespace's ComputeDomains (count/computedomains.resource.nvidia.com).
	Domains int64
	// Channels bounds the channel devices its ResourceClaims request through the channel
	// DeviceClass: one per pod and node of its jobs.
	Channels int64
}

// Default quotas of `cdplane assign namespace`: room for a few domains and for jobs of up to
// 2,048 nodes (28 NVL72 racks) at once.
const (
	DefaultQuotaDomains  = 16
	DefaultQuotaChannels = 2048
)

// ChannelQuotaResource is the quota key of the channel devices requested through the channel
// DeviceClass.
const ChannelQuotaResource corev1.ResourceName = cdv1beta1.ChannelDeviceClass + ".deviceclass.resource.k8s.io/devices"

// DomainQuotaResource is the quota key of a namespace's ComputeDomains.
const DomainQuotaResource corev1.ResourceName = "count/computedomains." + cdv1beta1.GroupName

// QuotaName is the name of the plane's ResourceQuota in an assigned namespace.
func QuotaName(id string) string { return plane.Name(id, "cdplane-quota") }

// QuotaObject is the plane's ResourceQuota for namespace ns, nil when q bounds nothing.
func QuotaObject(id, ns string, q Quota) *corev1.ResourceQuota {
	hard := corev1.ResourceList{}
	if q.Domains > 0 {
		hard[DomainQuotaResource] = *resource.NewQuantity(q.Domains, resource.DecimalSI)
	}
	if q.Channels > 0 {
		hard[ChannelQuotaResource] = *resource.NewQuantity(q.Channels, resource.DecimalSI)
	}
	if len(hard) == 0 {
		return nil
	}
	return &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: QuotaName(id), Namespace: ns, Labels: map[string]string{
			cdv1beta1.ControlPlaneLabel: id, "app.kubernetes.io/managed-by": "cdplane",
		}},
		Spec: corev1.ResourceQuotaSpec{Hard: hard},
	}
}

// AssignWithQuota is Assign and, for a namespace, SetQuota: what `cdplane assign` does. A
// same-named ResourceQuota that is not the plane's is refused before anything changes; a
// failure after the assignment is a PartialError naming the command that finishes it.
func AssignWithQuota(ctx context.Context, c client.Client, id string, t Target, q Quota) (*Result, error) {
	if t.Kind != KindNamespace {
		return Assign(ctx, c, id, t)
	}
	if err := ValidateAssignment(id, t); err != nil {
		return nil, err
	}
	if QuotaObject(id, t.Name, q) != nil {
		if err := checkQuotaOwner(ctx, c, id, t); err != nil {
			return nil, err
		}
	}
	res, err := Assign(ctx, c, id, t)
	if err != nil {
		return res, err
	}
	qres, err := SetQuota(ctx, c, id, t, q)
	res.Changes = append(res.Changes, qres.Changes...)
	if err != nil && !IsRefused(err) {
		return res, res.partial("assign", err, "the plane's ResourceQuota in "+t.String())
	}
	return res, err
}

// checkQuotaOwner refuses a same-named ResourceQuota that is not the plane's.
func checkQuotaOwner(ctx context.Context, c client.Client, id string, t Target) error {
	cur := &corev1.ResourceQuota{}
	err := c.Get(ctx, client.ObjectKey{Namespace: t.Name, Name: QuotaName(id)}, cur)
	switch {
	case apierrors.IsNotFound(err):
		return nil
	case err != nil:
		return fmt.Errorf("reading ResourceQuota %s/%s: %w", t.Name, QuotaName(id), err)
	}
	return foreignQuota(id, t, cur)
}

// foreignQuota refuses cur, the ResourceQuota of the plane's name, unless it is the plane's.
func foreignQuota(id string, t Target, cur *corev1.ResourceQuota) error {
	if v, ok := planeLabel(cur.Labels); !ok || v != id {
		return &RefusedError{Target: t, ID: id, Reason: fmt.Sprintf(
			"ResourceQuota %s/%s exists and is not control plane %q's (it carries %s); remove or rename it, or pass --max-domains=0 --max-channels=0",
			t.Name, QuotaName(id), id, describeOwner(v, ok))}
	}
	return nil
}

// SetQuota brings the plane's ResourceQuota in an assigned namespace to q: created, updated, or
// (q bounding nothing) deleted. A same-named ResourceQuota that is not the plane's is refused,
// with nothing changed. It writes with the version read; a conflict reads again.
func SetQuota(ctx context.Context, c client.Client, id string, t Target, q Quota) (*Result, error) {
	res := &Result{Target: t, ID: id}
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		desired := QuotaObject(id, t.Name, q)
		key := t.Name + "/" + QuotaName(id)
		cur := &corev1.ResourceQuota{}
		err := c.Get(ctx, client.ObjectKey{Namespace: t.Name, Name: QuotaName(id)}, cur)
		switch {
		case apierrors.IsNotFound(err):
			if desired == nil {
				return nil
			}
			if err := c.Create(ctx, desired); err != nil {
				return fmt.Errorf("creating ResourceQuota %s: %w", key, err)
			}
			res.add("ResourceQuota %s created (%s)", key, describeQuota(desired.Spec.Hard))
			return nil
		case err != nil:
			return fmt.Errorf("reading ResourceQuota %s: %w", key, err)
		}
		if err := foreignQuota(id, t, cur); err != nil {
			if desired == nil {
				return nil // not the plane's, and nothing to set
			}
			return err
		}
		if desired == nil {
			if err := deleteExact(ctx, c, cur); err != nil && !apierrors.IsNotFound(err) {
				return fmt.Errorf("deleting ResourceQuota %s: %w", key, err)
			}
			res.add("ResourceQuota %s deleted", key)
			return nil
		}
		if equality.Semantic.DeepEqual(cur.Spec.Hard, desired.Spec.Hard) {
			return nil
		}
		cur.Spec.Hard = desired.Spec.Hard
		if err := c.Update(ctx, cur); err != nil {
			return fmt.Errorf("updating ResourceQuota %s: %w", key, err)
		}
		res.add("ResourceQuota %s updated (%s)", key, describeQuota(desired.Spec.Hard))
		return nil
	})
	return res, err
}

func describeQuota(hard corev1.ResourceList) string {
	var out []string
	for _, k := range []corev1.ResourceName{DomainQuotaResource, ChannelQuotaResource} {
		if v, ok := hard[k]; ok {
			out = append(out, fmt.Sprintf("%s=%s", k, v.String()))
		}
	}
	return strings.Join(out, ", ")
}

// removeQuota deletes the plane's ResourceQuota from a namespace it leaves; another's same-named
// one is left alone.
func removeQuota(ctx context.Context, c client.Client, id string, t Target, res *Result) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error {
		key := t.Name + "/" + QuotaName(id)
		cur := &corev1.ResourceQuota{}
		if err := c.Get(ctx, client.ObjectKey{Namespace: t.Name, Name: QuotaName(id)}, cur); apierrors.IsNotFound(err) {
			return nil
		} else if err != nil {
			return fmt.Errorf("reading ResourceQuota %s: %w", key, err)
		}
		if v, ok := planeLabel(cur.Labels); !ok || v != id {
			return nil
		}
		if err := deleteExact(ctx, c, cur); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting ResourceQuota %s: %w", key, err)
		}
		res.add("ResourceQuota %s deleted", key)
		return nil
	})
}
