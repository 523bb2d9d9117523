package kubelet

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"
)

// DefaultTokenExpiration is the lifetime of the tokens requested for pods.
const DefaultTokenExpiration = time.Hour

// projectedTokenExpiration is a projected service-account token's lifetime when its
// expirationSeconds is unset (the API's default).
const projectedTokenExpiration = int64(3600)

// tokenFile is a service-account token of a pod kept in one or more files.
type tokenFile struct {
	paths     []string
	audiences []string
	expSecs   int64
	token     []byte // the last token requested; nil before the first
	renewAt   time.Time
}

// podTokens requests the pod's service-account tokens (TokenRequest bound to the pod) and
// renews each once 80% of its lifetime has passed.
type podTokens struct {
	client kubernetes.Interface
	pod    *corev1.Pod
	mu     sync.Mutex
	files  []*tokenFile
}

// add requests a token and writes it to path; a token of the same audiences and lifetime is
// requested once for all its paths, as a kubelet's token manager keeps one per pod, audiences
// and lifetime: a token still fresh is written to a new path as it is, and a pod set-up tried
// again (a volume that failed) requests nothing more.
func (t *podTokens) add(ctx context.Context, path string, audiences []string, expSecs int64) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	for _, f := range t.files {
		if f.expSecs != expSecs || !equalStrings(f.audiences, audiences) {
			continue
		}
		if !slices.Contains(f.paths, path) {
			f.paths = append(f.paths, path)
		}
		if f.token == nil || !time.Now().Before(f.renewAt) {
			return t.refresh(ctx, f)
		}
		return writeToken(path, f.token)
	}
	f := &tokenFile{paths: []string{path}, audiences: audiences, expSecs: expSecs}
	if err := t.refresh(ctx, f); err != nil {
		return err
	}
	t.files = append(t.files, f)
	return nil
}

func (t *podTokens) refresh(ctx context.Context, f *tokenFile) error {
	tr := &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
		Audiences: f.audiences, ExpirationSeconds: &f.expSecs,
		BoundObjectRef: &authenticationv1.BoundObjectReference{Kind: "Pod", APIVersion: "v1", Name: t.pod.Name, UID: t.pod.UID},
	}}
	got, err := t.client.CoreV1().ServiceAccounts(t.pod.Namespace).CreateToken(ctx, t.pod.Spec.ServiceAccountName, tr, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("requesting a token for service account %s: %w", t.pod.Spec.ServiceAccountName, err)
	}
	now := time.Now()
	life := got.Status.ExpirationTimestamp.Sub(now)
	if life <= 0 {
		life = time.Duration(f.expSecs) * time.Second
	}
	f.renewAt = now.Add(life * 8 / 10)
	f.token = []byte(got.Status.Token)
	for _, p := range f.paths {
		if err := writeToken(p, f.token); err != nil {
			return err
		}
	}
	return nil
}

func writeToken(path string, token []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return writePodFile(path, token, 0o600)
}

// credentialsExpiration is the lifetime of the token in a pod's credentials directory: that of
// the pod's own projected service-account token without an audience (the one the
// ServiceAccount admission plugin adds, 3607 s), so that one request serves both; else
// DefaultTokenExpiration.
func credentialsExpiration(pod *corev1.Pod) int64 {
	for _, v := range pod.Spec.Volumes {
		if v.Projected == nil {
			continue
		}
		for _, s := range v.Projected.Sources {
			if t := s.ServiceAccountToken; t != nil && t.Audience == "" {
				return ptr.Deref(t.ExpirationSeconds, projectedTokenExpiration)
			}
		}
	}
	return int64(DefaultTokenExpiration / time.Second)
}

// renew keeps the tokens fresh until ctx ends; a failed renewal is retried after 10s.
func (t *podTokens) renew(ctx context.Context) {
	for {
		t.mu.Lock()
		next := time.Now().Add(time.Hour)
		for _, f := range t.files {
			if f.renewAt.Before(next) {
				next = f.renewAt
			}
		}
		t.mu.Unlock()
		timer := time.NewTimer(time.Until(next))
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-timer.C:
		}
		t.mu.Lock()
		for _, f := range t.files {
			if time.Now().Before(f.renewAt) {
				continue
			}
			if err := t.refresh(ctx, f); err != nil {
				klog.FromContext(ctx).Error(err, "Renewing a service-account token", "pod", klog.KObj(t.pod))
				f.renewAt = time.Now().Add(10 * time.Second)
			}
		}
		t.mu.Unlock()
	}
}

// setupCredentials gives a pod with a service account (and automount not disabled) its
// credentials: <podDir>/serviceaccount/{token,ca.crt,namespace}, seen by the containers at
// ServiceAccountMountPath unless they mount something there themselves, and
// <podDir>/kubeconfig (server, CA, token file), whose path goes into KUBECONFIG. It returns the
// two paths, or empty strings for a pod without credentials.
func (w *podWorker) setupCredentials(ctx context.Context, pod *corev1.Pod) (saDir, kubeconfig string, err error) {
	if pod.Spec.ServiceAccountName == "" || (pod.Spec.AutomountServiceAccountToken != nil && !*pod.Spec.AutomountServiceAccountToken) {
		return "", "", nil
	}
	saDir = filepath.Join(w.dir, "serviceaccount")
	token := filepath.Join(saDir, "token")
	if err := w.tokens.add(ctx, token, nil, credentialsExpiration(pod)); err != nil {
		return "", "", err
	}
	files := map[string][]byte{"ca.crt": w.k.cfg.APIServerCA, "namespace": []byte(pod.Namespace)}
	if err := writeFiles(saDir, files, 0o644); err != nil {
		return "", "", err
	}
	kc := clientcmdapi.NewConfig()
	kc.Clusters["sim"] = &clientcmdapi.Cluster{Server: w.k.cfg.APIServerURL, CertificateAuthority: filepath.Join(saDir, "ca.crt")}
	kc.AuthInfos["pod"] = &clientcmdapi.AuthInfo{TokenFile: token}
	kc.Contexts["pod"] = &clientcmdapi.Context{Cluster: "sim", AuthInfo: "pod", Namespace: pod.Namespace}
	kc.CurrentContext = "pod"
	data, err := clientcmd.Write(*kc)
	if err != nil {
		return "", "", err
	}
	kubeconfig = filepath.Join(w.dir, "kubeconfig")
	if err := writePodFile(kubeconfig, data, 0o600); err != nil {
		return "", "", err
	}
	return saDir, kubeconfig, nil
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
