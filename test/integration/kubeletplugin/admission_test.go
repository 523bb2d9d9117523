package kubeletplugin

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	resourcev1 "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/testutil"
	"cdplane/internal/testutil/prereqs"
)

var (
	manifestsOnce sync.Once
	manifestsErr  error
)

// installManifests creates the DeviceClasses and the opaque config admission policy with its
// binding from the prerequisites chart once per test binary, as `helm install` would. They are cluster-scoped and shared by all tests.
func installManifests(t *testing.T) {
	t.Helper()
	manifestsOnce.Do(func() { manifestsErr = applyManifests() })
	if manifestsErr != nil {
		t.Fatalf("installing the prerequisites: %v", manifestsErr)
	}
}

func applyManifests() error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := prereqs.Create(ctx, testCluster.Client, "deviceclasses.yaml", "opaque-config-policy.yaml"); err != nil {
		return err
	}
	// The policies take effect a few seconds after they are created: wait until a dry-run
	// ComputeDomain create is admitted.
	probe := testutil.MakeComputeDomain("admission-probe").Namespace("default").Obj()
	return createAdmitted(ctx, client.NewDryRunClient(testCluster.Client), probe)
}

// TestAdmissionRefusesBadOpaqueConfigs: with the shipped ValidatingAdmissionPolicy installed, a
// ResourceClaim or ResourceClaimTemplate whose opaque config for this driver has an unknown field,
// a wrong kind or a wrong apiVersion is refused at creation with a message naming the field;
// good configs, and other drivers' configs, are admitted.
func TestAdmissionRefusesBadOpaqueConfigs(t *testing.T) {
	t.Parallel()
	installManifests(t)
	e := newEnv(t)
	const uid = "0b7e3f4a-1c2d-4e5f-8a9b-0c1d2e3f4a5b"
	cfg := func(apiVersion, kind, extra string) string {
		return fmt.Sprintf(`{"apiVersion":%q,"kind":%q,"domainID":%q%s}`, apiVersion, kind, uid, extra)
	}
	gv := cdv1beta1.GroupVersion.String()
	cases := map[string]struct {
		driver, params string
		want           string // "" admits
	}{
		"unknown field":           {cdv1beta1.DriverName, cfg(gv, "ComputeDomainChannelConfig", `,"unexpectedField":"x"`), `unknown field "unexpectedField"`},
		"unknown field of daemon": {cdv1beta1.DriverName, cfg(gv, "ComputeDomainDaemonConfig", `,"allocationMode":"All"`), `unknown field "allocationMode"`},
		"wrong kind":              {cdv1beta1.DriverName, cfg(gv, "GpuConfig", ""), `field kind is "GpuConfig"`},
		"wrong apiVersion":        {cdv1beta1.DriverName, cfg("resource.nvidia.com/v1", "ComputeDomainChannelConfig", ""), `field apiVersion is "resource.nvidia.com/v1"`},
		"bad allocationMode":      {cdv1beta1.DriverName, cfg(gv, "ComputeDomainChannelConfig", `,"allocationMode":"Some"`), `field allocationMode is "Some"`},
		"good channel config":     {cdv1beta1.DriverName, cfg(gv, "ComputeDomainChannelConfig", `,"allocationMode":"All"`), ""},
		"good daemon config":      {cdv1beta1.DriverName, cfg(gv, "ComputeDomainDaemonConfig", ""), ""},
		"another driver's config": {"gpu.nvidia.com", `{"apiVersion":"x/v1","kind":"Other","unexpectedField":1}`, ""},
	}

	// The policy takes effect shortly after it is created: wait until the first case is refused.
	probe := 0
	e.Eventually(30*time.Second, "the admission policy refuses an unknown field", func() (bool, error) {
		probe++
		err := createClaim(e, fmt.Sprintf("probe-%d", probe), cdv1beta1.DriverName, cases["unknown field"].params)
		return err != nil && strings.Contains(err.Error(), `unknown field "unexpectedField"`), err
	})

	for name, tc := range cases {
		slug := strings.ToLower(strings.ReplaceAll(strings.ReplaceAll(name, " ", "-"), "'", ""))
		for kind, create := range map[string]func(*env, string, string, string) error{
			"ResourceClaim": createClaim, "ResourceClaimTemplate": createTemplate,
		} {
			err := create(e, strings.ToLower(kind)+"-"+slug, tc.driver, tc.params)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("%s with %s: refused: %v", kind, name, err)
			case tc.want != "" && err == nil:
				t.Errorf("%s with %s: admitted, want refused with %s", kind, name, tc.want)
			case tc.want != "" && !strings.Contains(err.Error(), tc.want):
				t.Errorf("%s with %s: refused with %q, want the message to contain %s", kind, name, err, tc.want)
			case tc.want != "" && !apierrors.IsInvalid(err):
				t.Errorf("%s with %s: refused with %v, want reason Invalid", kind, name, metav1.StatusReason(apierrors.ReasonForError(err)))
			}
		}
	}
}

func opaqueSpec(driver, params string) resourcev1.ResourceClaimSpec {
	spec := claimSpec("channel", cdv1beta1.ChannelDeviceClass, runtime.RawExtension{Raw: []byte(params)})
	spec.Devices.Config[0].Opaque.Driver = driver
	return spec
}

func createClaim(e *env, name, driver, params string) error {
	claim := &resourcev1.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns}, Spec: opaqueSpec(driver, params)}
	return e.C.Create(e.Ctx(), claim)
}

func createTemplate(e *env, name, driver, params string) error {
	tmpl := &resourcev1.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.ns},
		Spec:       resourcev1.ResourceClaimTemplateSpec{Spec: opaqueSpec(driver, params)},
	}
	return e.C.Create(e.Ctx(), tmpl)
}
