package planes

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/plane"
)

// identity is a user of the apiserver, authenticated for real: a client certificate, or a
// service-account token from the TokenRequest API.
type identity struct {
	subject rbacv1.Subject
	cfg     *rest.Config
	c       client.Client
}

var (
	bindingSeq atomic.Int32
	// addUserMu serialises certificate users: envtest's certificate authority is not safe for
	// concurrent use (the race detector sees its serial counter race).
	addUserMu sync.Mutex
)

// newIdentity is a user authenticated by a client certificate, in groups.
func newIdentity(_ context.Context, name string, groups []string) (*identity, error) {
	addUserMu.Lock()
	cfg, err := testCluster.UserConfig(name, groups...)
	addUserMu.Unlock()
	if err != nil {
		return nil, err
	}
	return withConfig(rbacv1.Subject{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: name}, cfg)
}

// serviceAccountIdentity is service account name in namespace ns, created if needed (the
// namespace labelled with labels), authenticated by a bound token.
func serviceAccountIdentity(ctx context.Context, ns, name string, labels map[string]string) (*identity, error) {
	c := testCluster.Client
	if err := c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: labels}}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating namespace %s: %w", ns, err)
	}
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if err := c.Create(ctx, sa); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, fmt.Errorf("creating service account %s/%s: %w", ns, name, err)
	}
	cs, err := kubernetes.NewForConfig(testCluster.Config)
	if err != nil {
		return nil, err
	}
	tr, err := cs.CoreV1().ServiceAccounts(ns).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr(int64(3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return nil, fmt.Errorf("requesting a token for %s/%s: %w", ns, name, err)
	}
	cfg := &rest.Config{
		Host:            testCluster.Config.Host,
		TLSClientConfig: rest.TLSClientConfig{CAData: testCluster.Config.CAData},
		BearerToken:     tr.Status.Token,
	}
	return withConfig(rbacv1.Subject{Kind: rbacv1.ServiceAccountKind, Namespace: ns, Name: name}, cfg)
}

// planeServiceAccount is a plane's controller or daemon service account in its driver namespace
// (labelled with the plane, as the plane's own objects are).
func planeServiceAccount(t *testing.T, id, legacy string) *identity {
	t.Helper()
	ns := plane.Name(id, plane.DriverNamespaceLegacyName)
	u, err := serviceAccountIdentity(testContext(t), ns, plane.Name(id, legacy), map[string]string{cdv1beta1.ControlPlaneLabel: id})
	if err != nil {
		t.Fatal(err)
	}
	return u
}

func withConfig(subject rbacv1.Subject, cfg *rest.Config) (*identity, error) {
	c, err := client.New(cfg, client.Options{Scheme: testCluster.Scheme})
	if err != nil {
		return nil, err
	}
	return &identity{subject: subject, cfg: cfg, c: c}, nil
}

func (u *identity) String() string {
	if u.subject.Kind == rbacv1.ServiceAccountKind {
		return "system:serviceaccount:" + u.subject.Namespace + ":" + u.subject.Name
	}
	return u.subject.Name
}

// bindClusterRole creates role if needed and binds it to the identity cluster-wide.
func (u *identity) bindClusterRole(ctx context.Context, role *rbacv1.ClusterRole) error {
	if err := createRole(ctx, role); err != nil {
		return err
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("%s-%d", role.Name, bindingSeq.Add(1))},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role.Name},
		Subjects:   []rbacv1.Subject{u.subject},
	}
	if err := testCluster.Client.Create(ctx, crb); err != nil {
		return fmt.Errorf("binding %s to %s: %w", role.Name, u, err)
	}
	return u.waitAllowed(ctx, role.Rules[0], "")
}

// bindInNamespace binds ClusterRole roleName (created from role when given) to the identity in
// namespace ns.
func (u *identity) bindInNamespace(ctx context.Context, ns, roleName string, role *rbacv1.ClusterRole) error {
	if role != nil {
		if err := createRole(ctx, role); err != nil {
			return err
		}
	}
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%d", roleName, bindingSeq.Add(1))},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: roleName},
		Subjects:   []rbacv1.Subject{u.subject},
	}
	if err := testCluster.Client.Create(ctx, rb); err != nil {
		return fmt.Errorf("binding %s to %s in %s: %w", roleName, u, ns, err)
	}
	if role != nil {
		return u.waitAllowed(ctx, role.Rules[0], ns)
	}
	return nil
}

func createRole(ctx context.Context, role *rbacv1.ClusterRole) error {
	if err := testCluster.Client.Create(ctx, role.DeepCopy()); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating ClusterRole %s: %w", role.Name, err)
	}
	return nil
}

// waitAllowed waits until the authorizer grants the identity the first verb of a rule (RBAC
// reads roles and bindings from a cache).
func (u *identity) waitAllowed(ctx context.Context, rule rbacv1.PolicyRule, ns string) error {
	cs, err := kubernetes.NewForConfig(u.cfg)
	if err != nil {
		return err
	}
	resource, sub, _ := strings.Cut(rule.Resources[0], "/")
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return poll(ctx, func() (bool, error) {
		r, err := cs.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, selfReview(rule.APIGroups[0], resource, sub, rule.Verbs[0], ns), metav1.CreateOptions{})
		return err == nil && r.Status.Allowed, err
	})
}

func selfReview(group, resource, subresource, verb, ns string) *authorizationv1.SelfSubjectAccessReview {
	return &authorizationv1.SelfSubjectAccessReview{Spec: authorizationv1.SelfSubjectAccessReviewSpec{
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Group: group, Resource: resource, Subresource: subresource, Verb: verb, Namespace: ns,
		},
	}}
}
