package debugbundle

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	cdv1beta1 "cdplane/api/v1beta1"
	"cdplane/internal/cli"
	"cdplane/internal/debugbundle"
	"cdplane/internal/plane"
	"cdplane/internal/testutil"
)

const (
	planeID = "dbg-a"
	cliqueA = "7c1e2d3f-0000-4000-8000-000000000001.1"
	// What must never reach the bundle.
	secretValue   = "sup3r-s3cret-value-in-a-secret"
	secretName    = "dbg-registry-credentials"
	plantedToken  = "planted-t0ken-value-9f8e7d"
	plantedJWT    = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6eCJ9.c2lnbmF0dXJlLXZhbHVl"
	plantedBearer = "planted-bearer-5a4b3c"
)

func TestBundle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c := testCluster.Client
	kubeconfig, err := testCluster.AdminKubeconfig("debugbundle")
	if err != nil {
		t.Fatal(err)
	}
	create := func(objs ...client.Object) {
		t.Helper()
		for _, o := range objs {
			if err := c.Create(ctx, o); err != nil {
				t.Fatalf("creating %T %s: %v", o, o.GetName(), err)
			}
			t.Cleanup(func() { _ = c.Delete(context.Background(), o) })
		}
	}
	updateStatus := func(o client.Object) {
		t.Helper()
		if err := c.Status().Update(ctx, o); err != nil {
			t.Fatalf("writing the status of %T %s: %v", o, o.GetName(), err)
		}
	}
	planeLabels := map[string]string{cdv1beta1.ControlPlaneLabel: planeID}
	driverNS := plane.Name(planeID, plane.DriverNamespaceLegacyName)
	create(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: driverNS, Labels: planeLabels}})
	ns := testCluster.Namespace(t, planeLabels)
	create(controllerDeployment(driverNS))
	create(&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: secretName, Namespace: driverNS},
		StringData: map[string]string{"password": secretValue}})
	create(testutil.MakeNode("dn-1").Label(cdv1beta1.ControlPlaneLabel, planeID).Obj())

	// A kubelet plugin pod and a daemon pod, Running on a node without a kubelet.
	plugin := testutil.MakePod("plugin-dn-1", driverNS).NodeName("dn-1").
		Label("app.kubernetes.io/name", "cdplane-kubelet-plugin").Label("app.kubernetes.io/instance", driverNS).Obj()
	plugin.Spec.Containers[0].Name, plugin.Spec.Containers[0].Command = "plugin", []string{"cdplane-kubelet-plugin"}
	plugin.Spec.Containers[0].Args = []string{"--state-dir=/var/lib/kubelet/plugins/compute-domain.nvidia.com", "--cdi-root=/var/run/cdi"}
	create(plugin)
	plugin.Status.Phase = corev1.PodRunning
	updateStatus(plugin)

	cd := testutil.MakeComputeDomain("train").Namespace(ns).NumNodes(1).Label(cdv1beta1.ControlPlaneLabel, planeID).Obj()
	cd.Annotations = map[string]string{"example.com/token": plantedToken, "example.com/note": "signed " + plantedJWT}
	create(cd)
	uid := string(cd.UID)
	ds := testutil.MakeDaemonSet(cdv1beta1.DaemonSetName(uid), driverNS).Selector(cdv1beta1.ComputeDomainLabel, uid).Obj()
	create(ds)
	owner := testutil.ControllerRef("apps/v1", "DaemonSet", ds.Name, ds.UID)
	create(testutil.MakeClique(cdv1beta1.CliqueName(uid, cliqueA), driverNS).
		Label(cdv1beta1.ComputeDomainLabel, uid).Label(cdv1beta1.CliqueIDLabel, cliqueA).OwnedBy(owner).
		Daemon("dn-1", "10.1.0.1", cliqueA, 0, "NotReady").Obj())
	daemon := testutil.MakePod("computedomain-daemon-dn-1", driverNS).NodeName("dn-1").OwnedBy(owner).
		Label(cdv1beta1.ComputeDomainLabel, uid).Label(cdv1beta1.CliqueIDLabel, cliqueA).Obj()
	create(daemon)
	daemon.Status.Phase = corev1.PodRunning
	updateStatus(daemon)

	workload := testutil.MakePod("worker-0", ns).NodeName("dn-1").Obj()
	create(workload)
	claim := testutil.MakeResourceClaim("channel-dn-1", ns).Label(cdv1beta1.ComputeDomainLabel, uid).
		Request("channel", cdv1beta1.ChannelDeviceClass).Device("channel", cdv1beta1.DriverName, "dn-1", "channel-0").
		NodeName("dn-1").ReservedFor(workload.Name, workload.UID).Obj()
	create(claim)
	claim.Status = testutil.MakeResourceClaim("", "").Device("channel", cdv1beta1.DriverName, "dn-1", "channel-0").
		NodeName("dn-1").ReservedFor(workload.Name, workload.UID).Obj().Status
	updateStatus(claim)
	create(&corev1.Event{
		ObjectMeta:     metav1.ObjectMeta{Name: "worker-0.prepare", Namespace: ns},
		InvolvedObject: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: workload.Name, UID: workload.UID},
		Reason:         "FailedPrepareDynamicResources", Type: corev1.EventTypeWarning,
		Message:        "calling the plugin with Authorization: Bearer " + plantedBearer,
		FirstTimestamp: metav1.Now(), LastTimestamp: metav1.Now(), Count: 1,
	})

	out := filepath.Join(t.TempDir(), "bundle.tar.gz")
	var stdout, stderr bytes.Buffer
	code := cli.Main([]string{"debug", "bundle", "--kubeconfig", kubeconfig, "-o", out, "--log-lines", "50"}, &stdout, &stderr)
	t.Logf("exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	if code != 0 {
		t.Fatalf("cdplane debug bundle: exit %d", code)
	}
	if strings.TrimSpace(stdout.String()) != out {
		t.Errorf("stdout %q, want the bundle's path %s", stdout.String(), out)
	}
	if !strings.Contains(stderr.String(), "Reading the logs of") {
		t.Errorf("no progress line on stderr:\n%s", stderr.String())
	}
	names, files := readBundle(t, out)
	t.Logf("bundle files:\n%s", strings.Join(names, "\n"))

	domainDir := "domains/" + ns + "/train/"
	nsDir := "namespaces/" + driverNS + "/"
	for _, want := range []string{
		"cluster/version.json", "status/planes.json", "computedomains.json", "computedomaincliques.json", "nodes.json", "resourceslices.json",
		domainDir + "status.json", domainDir + "resourceclaims.json", domainDir + "pods.json", domainDir + "events.json",
		nsDir + "pods.json", nsDir + "daemonsets.json", nsDir + "deployments.json", nsDir + "resourceclaims.json", nsDir + "events.json",
		debugbundle.ErrorsFile, debugbundle.ManifestFile,
	} {
		if !slices.Contains(names, want) {
			t.Errorf("bundle lacks %s", want)
		}
	}

	// The manifest lists every other file, and what failed.
	var m debugbundle.Manifest
	if err := json.Unmarshal([]byte(files[debugbundle.ManifestFile]), &m); err != nil {
		t.Fatal(err)
	}
	var listed []string
	for _, f := range m.Files {
		listed = append(listed, f.Path)
	}
	if want := slices.DeleteFunc(slices.Clone(names), func(n string) bool { return n == debugbundle.ManifestFile }); !slices.Equal(listed, want) {
		t.Errorf("manifest lists %v, bundle holds %v", listed, want)
	}
	// No kubelet: the pods' logs and the execs fail, recorded, not fatal.
	errs := files[debugbundle.ErrorsFile]
	t.Logf("errors.txt:\n%s", errs)
	for _, want := range []string{
		"logs/" + driverNS + "/computedomain-daemon-dn-1/main.log: reading the log of container main of pod " + driverNS + "/computedomain-daemon-dn-1",
		"logs/" + driverNS + "/plugin-dn-1/plugin.log:",
		"nodes/dn-1/kubelet-plugin/: reading the checkpoint and CDI specs of kubelet plugin " + driverNS + "/plugin-dn-1",
		"nodes/dn-1/imex/computedomain-daemon-dn-1.nvidia-imex-ctl-N.txt: running nvidia-imex-ctl -N in daemon pod",
	} {
		if !strings.Contains(errs, want) {
			t.Errorf("errors.txt lacks %q:\n%s", want, errs)
		}
	}
	if len(m.Failures) != strings.Count(errs, "\n") {
		t.Errorf("manifest has %d failures, errors.txt %d lines", len(m.Failures), strings.Count(errs, "\n"))
	}

	// What the bundle says about the domain.
	if !strings.Contains(files[domainDir+"status.json"], `"uid": "`+uid+`"`) || !strings.Contains(files[domainDir+"resourceclaims.json"], "channel-dn-1") ||
		!strings.Contains(files[domainDir+"pods.json"], "worker-0") || !strings.Contains(files[domainDir+"events.json"], "FailedPrepareDynamicResources") {
		t.Errorf("the domain's files lack its status, claim, pod or event")
	}
	if !strings.Contains(files["computedomains.json"], `"example.com/token": "REDACTED"`) {
		t.Errorf("the planted token is not shown redacted in computedomains.json")
	}

	// Nothing secret anywhere.
	for name, data := range files {
		for _, secret := range []string{secretValue, secretName, plantedToken, plantedJWT, plantedBearer} {
			if strings.Contains(data, secret) || strings.Contains(name, secret) {
				t.Errorf("%s holds %q", name, secret)
			}
		}
		if strings.Contains(strings.ToLower(name), "secret") {
			t.Errorf("bundle holds %s", name)
		}
	}
}

// TestBundleBadInput: an unwritable output and an unreachable cluster are refused with an error
// that names them, and leave no file behind.
func TestBundleBadInput(t *testing.T) {
	dir := t.TempDir()
	unreachable := filepath.Join(dir, "unreachable.kubeconfig")
	if err := os.WriteFile(unreachable, []byte(`apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: abc}}]
contexts: [{name: x, context: {cluster: c, user: u}}]
current-context: x
`), 0o600); err != nil {
		t.Fatal(err)
	}
	// code: 2 for what the command line got wrong, found before any request; 1 for the rest.
	cases := map[string]struct {
		args []string
		want string
		code int
	}{
		"output directory missing": {[]string{"-o", filepath.Join(dir, "missing", "b.tar.gz"), "--kubeconfig", unreachable}, "cannot write the bundle to " + filepath.Join(dir, "missing", "b.tar.gz"), 1},
		"output is a directory":    {[]string{"-o", dir, "--kubeconfig", unreachable}, "cannot write the bundle to " + dir + ": it is a directory", 2},
		"cluster unreachable":      {[]string{"-o", filepath.Join(dir, "b.tar.gz"), "--kubeconfig", unreachable}, "the cluster at https://127.0.0.1:1 cannot be reached", 1},
		"log lines":                {[]string{"--log-lines", "0"}, "--log-lines must be positive", 2},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := cli.Main(append([]string{"debug", "bundle", "--timeout", "5s"}, tc.args...), &stdout, &stderr)
			if code != tc.code || !strings.Contains(stderr.String(), tc.want) {
				t.Errorf("exit %d, stderr %q, want %d and %q", code, stderr.String(), tc.code, tc.want)
			}
		})
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "unreachable.kubeconfig" {
			t.Errorf("left behind: %s", e.Name())
		}
	}
}

func readBundle(t *testing.T, path string) ([]string, map[string]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	gz, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(gz)
	var names []string
	files := map[string]string{}
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return names, files
		}
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(tr)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, hdr.Name)
		files[hdr.Name] = string(b)
	}
}

// controllerDeployment is the plane's controller Deployment as the plane chart renders it.
func controllerDeployment(ns string) *appsv1.Deployment {
	selector := map[string]string{"app.kubernetes.io/name": "cdplane-controller", "app.kubernetes.io/instance": ns}
	labels := map[string]string{"app.kubernetes.io/part-of": "cdplane", cdv1beta1.ControlPlaneLabel: planeID}
	for k, v := range selector {
		labels[k] = v
	}
	return &appsv1.Deployment{
		ObjectMeta: metav1.ObjectMeta{Name: planeID + "-cdplane-controller", Namespace: ns, Labels: labels},
		Spec: appsv1.DeploymentSpec{
			Selector: &metav1.LabelSelector{MatchLabels: selector},
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{Containers: []corev1.Container{{
					Name: "controller", Image: "cdplane:v9.9.9-test", Command: []string{"cdplane-controller"},
					Args: []string{"--leader-elect=false", "--control-plane-id=" + planeID},
				}}},
			},
		},
	}
}
